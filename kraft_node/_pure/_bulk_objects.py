"""Python objects made in bulk from columns: the pure-Python twin of
``kraft_node._native._bulk_objects`` (and its oracle in the tests).

Why: loading a snapshot of a million partitions makes a million immutable values
(``PartitionRegistration``: a frozen, slotted dataclass) and several million small tuples.
Made one by one in Python (``__init__``, or ``object.__setattr__`` per field) that is about a
microsecond per value; the native kernel writes the slots directly (tens of nanoseconds).
The twin gives the same objects, the slow way.

* ``new_objects(cls, names, columns)``: ``m`` new instances of ``cls`` (``m`` = the length of
  every column); instance ``i``'s slot ``names[j]`` is ``columns[j][i]``.  ``__init__``,
  ``__post_init__`` and ``__setattr__`` are NOT run: the caller has validated the values.
  ``cls`` must be a class whose instance state is exactly its ``__slots__`` (no ``__dict__``),
  and ``names`` must name each of its slots once (a slot left unset would make the instance
  raise AttributeError later): ValueError otherwise, naming what is wrong.
* ``tuples(offsets, values)``: ``[tuple(values[offsets[i]:offsets[i + 1]]) for i in range(m)]``
  (``offsets``: a 1-d integer array of ``m + 1`` non-decreasing positions within ``values``,
  a list); every empty entry is the one ``()`` object.  ValueError for offsets that are not.
* ``untrack=True`` (both): the native kernel takes each new object out of the cyclic
  collector's lists (``PyObject_GC_UnTrack``), so collections never walk them -- for values
  that cannot be part of a reference cycle (immutable, holding only such values; the caller
  promises it).  Python has no way to do that, so the twin ignores it: same objects, only
  the collector's work differs.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["encode_partition_rows", "new_objects", "slot_names", "tuples"]


def slot_names(cls: type) -> list[str]:
    """The instance slots of ``cls`` and its bases (ValueError when an instance would have a
    ``__dict__``, or a slot is not a plain member: then ``new_objects`` cannot make it)."""
    if not isinstance(cls, type):
        raise ValueError(f"new_objects needs a class, not {type(cls).__name__}")
    names: list[str] = []
    for klass in cls.__mro__:
        if klass is object:
            continue
        if "__slots__" not in klass.__dict__:
            raise ValueError(f"{klass.__name__} has no __slots__: its instances have a __dict__")
        raw = klass.__dict__["__slots__"]
        for name in ([raw] if isinstance(raw, str) else list(raw)):
            if name == "__weakref__":
                continue
            if name == "__dict__":
                raise ValueError(f"{klass.__name__} has a __dict__ slot")
            names.append(name)
    return names


def _slot_owners(cls: type) -> dict[str, type]:
    """slot name -> the class whose ``__slots__`` declares it (its member descriptor lives in
    that class's ``__dict__``, even where a subclass shadows the name with a property)."""
    owner: dict[str, type] = {}
    for klass in reversed(cls.__mro__):
        raw = klass.__dict__.get("__slots__", ())
        for name in ([raw] if isinstance(raw, str) else list(raw)):
            owner[name] = klass
    return owner


def _setters(cls: type, names: Sequence[str]) -> list[Any]:
    slots = slot_names(cls)
    if len(set(names)) != len(names):
        raise ValueError(f"a slot of {cls.__name__} is named twice: {list(names)}")
    missing = [s for s in slots if s not in names]
    unknown = [s for s in names if s not in slots]
    if missing or unknown:
        raise ValueError(f"new_objects({cls.__name__}): slots not given {missing}, not slots {unknown}")
    owner = _slot_owners(cls)
    return [owner[name].__dict__[name].__set__ for name in names]


def new_objects(cls: type, names: Sequence[str], columns: Sequence[Sequence[Any]], untrack: bool = False) -> list[Any]:
    if len(names) != len(columns):
        raise ValueError(f"{len(names)} slot names but {len(columns)} columns")
    setters = _setters(cls, names)
    m = len(columns[0]) if columns else 0
    for name, col in zip(names, columns):
        if len(col) != m:
            raise ValueError(f"column {name!r} has {len(col)} values, the first one {m}")
    new = object.__new__
    objs = [new(cls) for _ in range(m)]
    for set_, col in zip(setters, columns):
        for obj, value in zip(objs, col):
            set_(obj, value)
    return objs


def _check_offsets(offsets: Any, n: int) -> list[int]:
    offs = np.asarray(offsets)
    if offs.ndim != 1 or len(offs) < 1 or offs.dtype.kind not in "iu":
        raise ValueError("offsets must be a 1-d integer array of m + 1 positions")
    out = [int(o) for o in offs]
    if out[0] < 0 or out[-1] > n or any(b < a for a, b in zip(out, out[1:])):
        raise ValueError(f"offsets must be non-decreasing positions within the {n} values")
    return out


def tuples(offsets: Any, values: list[Any], untrack: bool = False) -> list[tuple[Any, ...]]:
    if not isinstance(values, list):
        raise TypeError(f"values must be a list, not {type(values).__name__}")
    offs = _check_offsets(offsets, len(values))
    return [tuple(values[a:b]) if b > a else () for a, b in zip(offs, offs[1:])]


# ---------------------------------------------------------------------------
# PartitionRecord values straight from registration objects
# ---------------------------------------------------------------------------

#: The slots ``encode_partition_records`` reads, in this order.
PARTITION_SLOTS = ("replicas", "isr", "removing_replicas", "adding_replicas", "leader", "leader_recovery_state",
                   "leader_epoch", "partition_epoch", "directories", "elr", "last_known_elr")
_INT32 = range(-(1 << 31), 1 << 31)


def _int32_list(value: Any) -> list[int] | None:
    if type(value) is not tuple or len(value) > 126:
        return None
    for v in value:
        if not isinstance(v, int) or v not in _INT32:
            return None
    return list(value)


def _compact_ints(values: list[int]) -> bytes:
    return bytes((len(values) + 1,)) + b"".join(v.to_bytes(4, "big", signed=True) for v in values)


def encode_partition_records(cls: type, header: bytes, pids: Sequence[int], topic_ids: Sequence[bytes],
                             regs: Sequence[Any], uuid_cls: type, version: int) -> list[bytes | None]:
    """Each registration's PartitionRecord value (``header``: the 3 frame bytes, then the
    body at ``version``; byte layout in ``kraft_node.metadata.controller.replication_snapshot``),
    or None where this encoder does not write it and the caller's typed encoder must: a
    value not of type ``cls``, a list that is not a tuple of int32s shorter than 127, a
    leader recovery state other than 0 (a tagged field), a non-empty ELR or last known ELR at
    version 2 (tagged), a directory that is not a ``uuid_cls`` with 16 bytes, or one that is
    not MIGRATING (all zero) at version 0 (unwritable there)."""
    if not (len(pids) == len(topic_ids) == len(regs)):
        raise ValueError("pids, topic_ids and regs must have the same length")
    _setters(cls, list(PARTITION_SLOTS) + [s for s in slot_names(cls) if s not in PARTITION_SLOTS])
    out: list[bytes | None] = []
    for pid, tid, reg in zip(pids, topic_ids, regs):
        out.append(_encode_one(cls, header, pid, tid, reg, uuid_cls, version))
    return out


def _encode_one(cls: type, header: bytes, pid: Any, tid: Any, reg: Any, uuid_cls: type, version: int) -> bytes | None:
    if type(reg) is not cls or type(tid) is not bytes or len(tid) != 16:
        return None
    lists = [_int32_list(getattr(reg, s)) for s in PARTITION_SLOTS[:4]]
    scalars = [getattr(reg, s) for s in ("leader", "leader_epoch", "partition_epoch")]
    if any(x is None for x in lists) or not all(isinstance(x, int) and x in _INT32 for x in (pid, *scalars)):
        return None
    lrs = reg.leader_recovery_state
    if not isinstance(lrs, int) or lrs != 0:
        return None
    elr, last_known = reg.elr, reg.last_known_elr
    if type(elr) is not tuple or type(last_known) is not tuple or (version >= 2 and (elr or last_known)):
        return None
    dirs = reg.directories
    if type(dirs) is not tuple or len(dirs) > 126:
        return None
    raw = []
    for d in dirs:
        if type(d) is not uuid_cls:
            return None
        b = d._b  # type: ignore[attr-defined]
        if type(b) is not bytes or len(b) != 16:
            return None
        raw.append(b)
    if version == 0 and any(b != bytes(16) for b in raw):
        return None
    body = [header, pid.to_bytes(4, "big", signed=True), tid]
    body += [_compact_ints(x) for x in lists if x is not None]
    body += [v.to_bytes(4, "big", signed=True) for v in scalars]
    if version >= 1:
        body.append(bytes((len(raw) + 1,)) + b"".join(raw))
    body.append(b"\x00")
    return b"".join(body)


# ---------------------------------------------------------------------------
# PartitionRecord values straight from columns (a PartitionBlock's rows)
# ---------------------------------------------------------------------------

#: The arrays ``encode_partition_rows`` takes, in this order.
PARTITION_ROW_COLUMNS = ("partition_id", "leader", "leader_epoch", "partition_epoch", "leader_recovery_state",
                         "replicas_offsets", "replicas", "isr_offsets", "isr", "removing_offsets", "removing",
                         "adding_offsets", "adding", "directories_offsets", "directories", "elr_offsets",
                         "last_known_elr_offsets")


def _row_span(offsets: list[int], row: int, nvalues: int, name: str) -> tuple[int, int]:
    a, b = offsets[row], offsets[row + 1]
    if a < 0 or b < a or b > nvalues:
        raise ValueError(f"encode_partition_rows: row {row}: {name} offsets {a}..{b} outside 0..{nvalues}")
    return a, b


def encode_partition_rows(header: bytes, columns: Sequence[Any], starts: Any, stops: Any, topic_ids: list[bytes],
                          version: int, prefixes: list[Any] | None = None) -> list[Any]:
    """The framed PartitionRecord value of each row of each span, or None where the caller must
    write that row another way.  Why: a snapshot of an image writes its partitions from the
    image's columns (``kraft_node.metadata.image.partition_block``), with no registration
    object per partition.

    ``columns``: the arrays named by :data:`PARTITION_ROW_COLUMNS`, in that order (a
    PartitionBlock's layout: int32 scalars, int8 leader recovery states, int32 offsets of
    ``rows + 1`` entries addressing their values -- not necessarily from 0 --, directories as
    ``uint8[k, 16]``; the ELR columns are only looked at for being empty).  Span ``k`` is
    rows ``starts[k] .. stops[k] - 1``, all of topic ``topic_ids[k]`` (16 bytes); the result
    lists the spans' rows in order, each span preceded by ``prefixes[k]`` (any object, put in
    as it is) when ``prefixes`` is given -- the snapshot writer's TopicRecord before its
    partitions, so a chunk of topics comes out as one list in record order.  Each value is
    ``header`` (the 3 frame bytes) and the body at ``version`` (layout in
    ``kraft_node.metadata.controller.replication_snapshot``); a row with no directories stands
    for MIGRATING (all zero) per replica, written as such at version 1+.

    None for a row whose record has a tagged field or whose writing is a loss: a leader
    recovery state other than 0, a non-empty ELR or last known ELR (tagged at version 2, a
    loss below it), a list of 127 or more entries, directories that do not pair up with the
    replicas, or a directory other than MIGRATING at version 0.  ValueError for spans outside
    the rows, offsets outside their values, columns of the wrong lengths, or a topic id that
    is not 16 bytes."""
    if len(header) != 3:
        raise ValueError("header must be the 3 frame bytes")
    if len(columns) != len(PARTITION_ROW_COLUMNS):
        raise ValueError(f"columns must be the {len(PARTITION_ROW_COLUMNS)} arrays {PARTITION_ROW_COLUMNS}")
    cols = dict(zip(PARTITION_ROW_COLUMNS, columns))
    dirs_array = np.ascontiguousarray(cols["directories"], dtype=np.uint8)
    if dirs_array.ndim != 2 or dirs_array.shape[1] != 16:
        raise ValueError(f"encode_partition_rows: directories must be uint8[k, 16], not shape {dirs_array.shape}")
    dirs = dirs_array.tobytes()
    nrows = len(cols["partition_id"])
    lists: dict[str, list[int]] = {name: np.asarray(cols[name], dtype=np.int32).tolist()
                                   for name in PARTITION_ROW_COLUMNS if name != "directories"}
    s = np.asarray(starts, dtype=np.int64).tolist()
    e = np.asarray(stops, dtype=np.int64).tolist()
    if len(e) != len(s) or len(topic_ids) != len(s) or (prefixes is not None and len(prefixes) != len(s)):
        raise ValueError("starts, stops, topic_ids (and prefixes) must have the same length")
    for name in PARTITION_ROW_COLUMNS[1:5]:
        if len(lists[name]) != nrows:
            raise ValueError(f"encode_partition_rows: {name} has {len(lists[name])} rows, partition_id {nrows}")
    for name in ("replicas", "isr", "removing", "adding", "directories", "elr", "last_known_elr"):
        if len(lists[name + "_offsets"]) != nrows + 1:
            raise ValueError(f"encode_partition_rows: {name}_offsets has {len(lists[name + '_offsets'])} entries "
                             f"for {nrows} rows")
    for k, (a, b) in enumerate(zip(s, e)):
        if a < 0 or b < a or b > nrows:
            raise ValueError(f"encode_partition_rows: span {k} is rows {a}..{b}, outside 0..{nrows}")
        if type(topic_ids[k]) is not bytes or len(topic_ids[k]) != 16:
            raise ValueError(f"encode_partition_rows: topic id {k} is not 16 bytes")
    out: list[Any] = []
    for k, (a, b) in enumerate(zip(s, e)):
        if prefixes is not None:
            out.append(prefixes[k])
        for row in range(a, b):
            out.append(_encode_row(header, lists, dirs, len(dirs_array), row, topic_ids[k], version))
    return out


def _encode_row(header: bytes, c: dict[str, list[int]], dirs: bytes, ndirs: int, row: int, tid: bytes,
                version: int) -> bytes | None:
    spans = {name: _row_span(c[name + "_offsets"], row, len(c[name]), name)
             for name in ("replicas", "isr", "removing", "adding")}
    da, db = _row_span(c["directories_offsets"], row, ndirs, "directories")
    nr = spans["replicas"][1] - spans["replicas"][0]
    empty_elr = all(c[n][row] == c[n][row + 1] for n in ("elr_offsets", "last_known_elr_offsets"))
    if c["leader_recovery_state"][row] != 0 or not empty_elr or any(b - a > 126 for a, b in spans.values()):
        return None
    if db - da not in (0, nr):
        return None
    raw = dirs[16 * da:16 * db]
    if version == 0 and any(raw):
        return None
    body = [header, c["partition_id"][row].to_bytes(4, "big", signed=True), tid]
    body += [_compact_ints(c[name][a:b]) for name, (a, b) in spans.items()]
    body += [c[name][row].to_bytes(4, "big", signed=True) for name in ("leader", "leader_epoch", "partition_epoch")]
    if version >= 1:
        body.append(bytes((nr + 1,)) + (raw or bytes(16 * nr)))
    body.append(b"\x00")
    return b"".join(body)


# ---------------------------------------------------------------------------
# Index entries grouped by (key, topic)
# ---------------------------------------------------------------------------

def group_by_key(keys: Any, topics: Any, entries: Any, nkeys: int, topic_objs: list[Any],
                 untrack: bool = False) -> list[tuple[list[Any], list[tuple[int, ...]]] | None] | None:
    """Entries grouped by key, then by topic: item ``k`` of the result is ``(objs, tuples)``
    for key ``k`` -- ``objs[j]`` is ``topic_objs[t]`` for the j-th topic ``t`` that key ``k``
    has entries of, ``tuples[j]`` those entries in input order -- or None when key ``k`` has
    none.  ``keys`` (in ``0 .. nkeys - 1``), ``topics`` (indexes into ``topic_objs``) and
    ``entries``: 1-d integer arrays of one length; each key's entries must come in
    non-decreasing topic order (entries of one topic together): None when they do not, and
    the caller groups another way.  ValueError for keys or topics out of range."""
    ks = [int(k) for k in np.asarray(keys)]
    ts = [int(t) for t in np.asarray(topics)]
    es = [int(e) for e in np.asarray(entries)]
    if not (len(ks) == len(ts) == len(es)):
        raise ValueError("keys, topics and entries must have the same length")
    if any(not 0 <= k < nkeys for k in ks) or any(not 0 <= t < len(topic_objs) for t in ts):
        raise ValueError("a key or topic index is out of range")
    per_key: list[list[tuple[int, int]]] = [[] for _ in range(nkeys)]
    for k, t, e in zip(ks, ts, es):
        per_key[k].append((t, e))
    out: list[tuple[list[Any], list[tuple[int, ...]]] | None] = []
    for items in per_key:
        if not items:
            out.append(None)
            continue
        objs: list[Any] = []
        tuples: list[tuple[int, ...]] = []
        last = -1
        group: list[int] = []
        for t, e in items:
            if t != last:
                if t < last:
                    return None
                if group:
                    tuples.append(tuple(group))
                objs.append(topic_objs[t])
                group = []
                last = t
            group.append(e)
        tuples.append(tuple(group))
        out.append((objs, tuples))
    return out
