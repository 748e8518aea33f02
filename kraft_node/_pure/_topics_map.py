"""The topics image's persistent maps and its delta's bulk apply: the pure-Python twin of
``kraft_node._native._topics_map`` (and its oracle in the tests).

Why a kernel: a zonal outage delta (10,000 partitions of 6,667 topics, at 100,000 topics) must
apply in under 10 ms, and the image keeps every topic in persistent maps (topic id -> topic,
name -> topic id).
With ``immutables.Map`` and a Python loop per changed topic that costs about 25 ms: a
microsecond per map write (a Python call, ``Uuid.__hash__`` in Python, a node copied per level)
and as much again to make each topic's new objects.  The native kernel does the whole loop in C
over its own hash trie (``csrc/pmap.h``).  This twin gives the same values with
``immutables.Map`` underneath, the slow way.

* ``TopicMap(items=None)``: an immutable mapping whose keys are exact ``str`` or exact
  :class:`~kraft_storage.messages.runtime.Uuid` objects (a topic's name or id) -- TypeError,
  naming the type, for any other key written; any other key read is simply absent.  ``items``:
  a mapping, or an iterable of (key, value) pairs (a later pair of a key wins).  Reads as a
  ``Mapping``; ``set(key, value)``, ``delete(key)`` (KeyError when absent) and ``update(items)``
  return a new map that shares every untouched part with this one (this one never changes;
  ``set`` of the value already there, by identity, returns this map); ``mutate()`` gives a
  :class:`TopicMapMutation`.  Equal (``==``) to another ``TopicMap`` of this twin with the same
  keys and equal values, never to another kind of mapping (as ``immutables.Map``); unhashable;
  iteration order is unspecified (it differs between the twins); pickles.
* ``TopicMapMutation(base=None)``: a map being changed in place (``immutables.MapMutation``'s
  API): ``m[k] = v`` / ``set``, ``del m[k]`` (KeyError when absent), ``update(items)``, reads
  (``get``, ``[]``, ``in``, ``len``; no iteration), ``finish()`` -> the ``TopicMap`` (the
  mutation then refuses changes: ValueError); a ``with`` block finishes it.  What it changes is
  never seen by ``base`` or by any map an earlier ``finish()`` returned.  A value a write drops
  is let go only once the write is over (its finalizer may use the mutation).
* ``TopicPlan(delta_cls, topic_cls, partitions_cls, empty_partitions, compact_min, compact,
  error_cls)``: what ``apply_topics_delta`` reads and makes, checked once: ``topic_cls`` has
  exactly the slots :data:`TOPIC_SLOTS`, ``partitions_cls`` exactly :data:`PARTITIONS_SLOTS`,
  ``delta_cls`` at least :data:`DELTA_SLOTS`, all plain slots with the default ``__new__``;
  ``empty_partitions`` a ``partitions_cls``; ``compact_min`` an int >= 0; ``compact`` and
  ``error_cls`` callables (ValueError otherwise).
* ``apply_topics_delta(changed, deleted, created, by_id, ids_by_name, plan)`` -> ``(by_id',
  ids_by_name')``: a topics delta applied to the two maps of an image (topic id -> topic, topic
  name -> topic id), as Kafka's ``TopicsDelta.apply``.  ``changed``: a dict whose values are
  deltas; ``deleted``, ``created``: sets of topic ids.  In this order:

  1. each id of ``deleted`` leaves ``by_id``, and its topic's name (``by_id[id]._name``)
     leaves ``ids_by_name`` (ValueError when the id or the name is not there);
  2. each delta ``d`` of ``changed.values()`` in order, ``t = d.image`` and ``p =
     t._partitions``: with changes (``d._changes`` not empty), the new topic is
     ``topic_cls(t._name, t._topic_id, q)`` with ``q = partitions_cls(p._block, p._start,
     p._stop, {**p._overrides, **d._changes}, extra, p._dense)`` -- ``extra`` is ``p._extra``,
     or ``tuple(sorted(p._extra + tuple(d._added)))`` when the delta adds partitions -- and
     ``q`` replaced by ``compact(q)`` when its overrides reach compaction (``len >=
     compact_min`` and ``2 * len > p._stop - p._start``); slots are set directly, no
     ``__init__``.  Without changes, a created topic (below) is ``t`` itself, and any other
     delta is skipped.  The new topic goes into ``by_id``.  A created topic -- one whose ``p``
     is ``empty_partitions`` and whose id is in ``created`` -- also goes into ``ids_by_name``,
     after checking that it takes no name held by another id and renames no id:
     ``error_cls("Topic name <name> is taken by topic id <id>: it cannot also name topic id
     <id>")`` / ``error_cls("Topic id <id> is topic <name>: a TopicRecord cannot rename it to
     <name>")``, against the maps as they are at that point.

  A map nothing was removed from or put in comes back itself (the same object: a delta that
  creates and deletes no topic leaves the name map as it was); on an error nothing changes (the
  maps are persistent).  TypeError when ``changed`` is not a dict,
  a delta or what it holds is not of the plan's classes, or the changes are not dicts.  The
  native kernel takes the new objects out of the cyclic collector (they hold no cycle; the
  twin cannot, so only the collector's work differs) and prefetches each group of topics'
  objects before it reads them (the loop is bound by cache misses, not by instructions).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import immutables

from kraft_storage.messages.runtime import Uuid

__all__ = ["DELTA_SLOTS", "PARTITIONS_SLOTS", "TOPIC_SLOTS", "TopicMap", "TopicMapMutation", "TopicPlan",
           "apply_topics_delta"]

#: The slots of a topic delta that ``apply_topics_delta`` reads (it may have more).
DELTA_SLOTS = ("image", "_changes", "_added")
#: Every slot of a topic image, in the order the kernel sets them.
TOPIC_SLOTS = ("_name", "_topic_id", "_partitions")
#: Every slot of a topic's partitions, in the order the kernel sets them.
PARTITIONS_SLOTS = ("_block", "_start", "_stop", "_overrides", "_extra", "_dense")

_MISSING: Any = object()
_FINISHED = "this TopicMapMutation has been finished"


def _check_key(key: object) -> None:
    if type(key) is not str and type(key) is not Uuid:
        raise TypeError(f"a TopicMap key is a str or a Uuid, not {type(key).__name__}")


def _is_key(key: object) -> bool:
    return type(key) is str or type(key) is Uuid


def _pairs(items: Any) -> Iterator[tuple[Any, Any]]:
    """(key, value) of a mapping or an iterable of pairs, each key checked."""
    source = items.items() if isinstance(items, Mapping) or hasattr(items, "items") else items
    for pair in source:
        key, value = pair
        _check_key(key)
        yield key, value


class TopicMap(Mapping[Any, Any]):
    """An immutable map of topics by name or by id (see the module doc)."""

    __slots__ = ("_m",)

    _m: immutables.Map[Any, Any]

    def __init__(self, items: Any = None) -> None:
        if hasattr(self, "_m"):
            raise TypeError("a TopicMap is immutable: __init__ cannot be called again")
        base: immutables.Map[Any, Any] = immutables.Map()
        self._m = base if items is None else base.update(_pairs(items))

    @classmethod
    def _of(cls, m: immutables.Map[Any, Any]) -> TopicMap:
        out: TopicMap = object.__new__(cls)
        out._m = m
        return out

    # -- reading -------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Any:
        if not _is_key(key):
            raise KeyError(key)
        return self._m[key]

    def get(self, key: Any, default: Any = None) -> Any:
        if not _is_key(key):
            return default
        return self._m.get(key, default)

    def __contains__(self, key: object) -> bool:
        return _is_key(key) and key in self._m

    def __len__(self) -> int:
        return len(self._m)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._m)

    def keys(self) -> Any:
        return self._m.keys()

    def values(self) -> Any:
        return self._m.values()

    def items(self) -> Any:
        return self._m.items()

    # -- new maps ------------------------------------------------------------------------
    def set(self, key: Any, value: Any) -> TopicMap:
        _check_key(key)
        if self._m.get(key, _MISSING) is value:
            return self
        return TopicMap._of(self._m.set(key, value))

    def delete(self, key: Any) -> TopicMap:
        if not _is_key(key):
            raise KeyError(key)
        return TopicMap._of(self._m.delete(key))

    def update(self, items: Any) -> TopicMap:
        return TopicMap._of(self._m.update(_pairs(items)))

    def mutate(self) -> TopicMapMutation:
        return TopicMapMutation(self)

    # -- value ---------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if type(other) is not TopicMap:
            return NotImplemented
        return self._m == other._m

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{k!r}: {v!r}" for k, v in self._m.items())
        return f"TopicMap({{{inner}}})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (TopicMap, (dict(self._m.items()),))


class TopicMapMutation:
    """A TopicMap being changed in place (see the module doc)."""

    __slots__ = ("_mm", "_done")

    def __init__(self, base: TopicMap | None = None) -> None:
        if base is not None and not isinstance(base, TopicMap):
            raise TypeError(f"a TopicMapMutation starts from a TopicMap, not {type(base).__name__}")
        start: immutables.Map[Any, Any] = immutables.Map() if base is None else base._m
        self._mm = start.mutate()
        self._done = False

    def _check(self) -> None:
        if self._done:
            raise ValueError(_FINISHED)

    def get(self, key: Any, default: Any = None) -> Any:
        if not _is_key(key):
            return default
        return self._mm.get(key, default)

    def __getitem__(self, key: Any) -> Any:
        if not _is_key(key):
            raise KeyError(key)
        return self._mm[key]

    def __contains__(self, key: object) -> bool:
        return _is_key(key) and key in self._mm

    def __len__(self) -> int:
        return len(self._mm)

    # A value a write drops is held until the write is over: its finalizer may use this mutation.
    def set(self, key: Any, value: Any) -> None:
        self._check()
        _check_key(key)
        dropped = self._mm.get(key)  # noqa: F841 -- held past the write
        self._mm[key] = value

    def __setitem__(self, key: Any, value: Any) -> None:
        self.set(key, value)

    def __delitem__(self, key: Any) -> None:
        self._check()
        if not _is_key(key):
            raise KeyError(key)
        dropped = self._mm.get(key)  # noqa: F841 -- held past the write
        del self._mm[key]

    def update(self, items: Any) -> None:
        self._check()
        dropped = []
        for key, value in _pairs(items):
            dropped.append(self._mm.get(key))
            self._mm[key] = value

    def finish(self) -> TopicMap:
        self._done = True
        return TopicMap._of(self._mm.finish())

    def __enter__(self) -> TopicMapMutation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def __repr__(self) -> str:
        return f"TopicMapMutation({len(self._mm)} entries{', finished' if self._done else ''})"


# ---------------------------------------------------------------------------------------------
# The topics delta's bulk apply
# ---------------------------------------------------------------------------------------------

def _slots(cls: type) -> list[str]:
    """Every instance slot of ``cls`` (ValueError when an instance would have a ``__dict__``)."""
    out: list[str] = []
    for klass in cls.__mro__:
        if klass is object:
            continue
        if "__slots__" not in klass.__dict__:
            raise ValueError(f"{klass.__name__} has no __slots__: its instances have a __dict__")
        raw = klass.__dict__["__slots__"]
        out += [n for n in ([raw] if isinstance(raw, str) else list(raw)) if n != "__weakref__"]
    return out


def _descriptors(cls: type, names: Iterable[str]) -> list[Any]:
    """The member descriptor of each slot name (ValueError when one is not a plain slot of ``cls``)."""
    out = []
    for name in names:
        for klass in cls.__mro__:
            d = klass.__dict__.get(name)
            if d is not None:
                break
        if type(d).__name__ != "member_descriptor":
            raise ValueError(f"{cls.__name__}.{name} is not a plain object slot")
        out.append(d)
    return out


def _check_class(cls: Any, names: tuple[str, ...], exact: bool) -> None:
    if not isinstance(cls, type):
        raise ValueError(f"TopicPlan needs classes, not {type(cls).__name__}")
    slots = _slots(cls)
    missing = [n for n in names if n not in slots]
    extra = [n for n in slots if n not in names] if exact else []
    if missing or extra:
        raise ValueError(f"TopicPlan: {cls.__name__} slots not found {missing}, not expected {extra}")
    if cls.__new__ is not object.__new__:
        raise ValueError(f"{cls.__name__} has its own __new__: the kernel would skip it")


class TopicPlan:
    """What ``apply_topics_delta`` reads and makes (see the module doc)."""

    __slots__ = ("delta_cls", "topic_cls", "partitions_cls", "empty_partitions", "compact_min", "compact",
                 "error_cls", "_get", "_set")

    def __init__(self, delta_cls: type, topic_cls: type, partitions_cls: type, empty_partitions: Any,
                 compact_min: int, compact: Any, error_cls: Any) -> None:
        _check_class(delta_cls, DELTA_SLOTS, False)
        _check_class(topic_cls, TOPIC_SLOTS, True)
        _check_class(partitions_cls, PARTITIONS_SLOTS, True)
        if type(empty_partitions) is not partitions_cls:
            raise ValueError(f"TopicPlan: the empty partitions are a {type(empty_partitions).__name__}, "
                             f"not a {partitions_cls.__name__}")
        if type(compact_min) is not int or compact_min < 0:
            raise ValueError(f"TopicPlan: compact_min {compact_min!r} is not a non-negative int")
        if not callable(compact) or not callable(error_cls):
            raise ValueError("TopicPlan: compact and error_cls must be callable")
        self.delta_cls = delta_cls
        self.topic_cls = topic_cls
        self.partitions_cls = partitions_cls
        self.empty_partitions = empty_partitions
        self.compact_min = compact_min
        self.compact = compact
        self.error_cls = error_cls
        self._get = [d.__get__ for d in _descriptors(delta_cls, DELTA_SLOTS)
                     + _descriptors(topic_cls, TOPIC_SLOTS) + _descriptors(partitions_cls, PARTITIONS_SLOTS)]
        self._set = [d.__set__ for d in _descriptors(topic_cls, TOPIC_SLOTS)
                     + _descriptors(partitions_cls, PARTITIONS_SLOTS)]


def _typed(what: str, value: Any, cls: type) -> Any:
    if type(value) is not cls:
        raise TypeError(f"apply_topics_delta: {what} is a {type(value).__name__}, not a {cls.__name__}")
    return value


def apply_topics_delta(changed: Any, deleted: Any, created: Any, by_id: TopicMap, ids_by_name: TopicMap,
                       plan: TopicPlan) -> tuple[TopicMap, TopicMap]:
    if type(changed) is not dict:
        raise TypeError(f"apply_topics_delta: changed is a {type(changed).__name__}, not a dict")
    _typed("by_id", by_id, TopicMap)
    _typed("ids_by_name", ids_by_name, TopicMap)
    _typed("plan", plan, TopicPlan)
    g_image, g_changes, g_added, g_name, g_tid, g_parts, g_block, g_start, g_stop, g_ov, g_extra, g_dense = plan._get
    s_name, s_tid, s_parts, s_block, s_start, s_stop, s_ov, s_extra, s_dense = plan._set
    topic_cls, parts_cls, empty = plan.topic_cls, plan.partitions_cls, plan.empty_partitions
    new = object.__new__
    ids: TopicMapMutation | None = None
    names: TopicMapMutation | None = None
    touched_ids = touched_names = False
    if deleted:
        ids, names = by_id.mutate(), ids_by_name.mutate()
        touched_ids = touched_names = True
        for tid in deleted:
            gone = ids.get(tid)
            if gone is None:
                raise ValueError(f"apply_topics_delta: deleted topic id {tid} is not in by_id")
            name = g_name(_typed("a deleted topic", gone, topic_cls))
            if name not in names:
                raise ValueError(f"apply_topics_delta: deleted topic {name} is not in ids_by_name")
            del ids[tid]
            del names[name]
    for delta in list(changed.values()):
        _typed("a delta", delta, plan.delta_cls)
        old = _typed("a delta's image", g_image(delta), topic_cls)
        parts = _typed("a topic's partitions", g_parts(old), parts_cls)
        changes = _typed("a delta's changes", g_changes(delta), dict)
        added = _typed("a delta's added partitions", g_added(delta), dict)
        name, tid = g_name(old), g_tid(old)
        is_created = parts is empty and tid in created
        if not changes:
            if not is_created:
                continue
            topic = old
        else:
            ov = _typed("a topic's overrides", g_ov(parts), dict)
            merged = {**ov, **changes} if ov else dict(changes)
            extra = g_extra(parts)
            if added:
                extra = tuple(sorted(extra + tuple(added)))
            p = new(parts_cls)
            for set_, value in zip((s_block, s_start, s_stop, s_ov, s_extra, s_dense),
                                   (g_block(parts), g_start(parts), g_stop(parts), merged, extra, g_dense(parts))):
                set_(p, value)
            if len(merged) >= plan.compact_min and 2 * len(merged) > g_stop(parts) - g_start(parts):
                p = _typed("a compacted topic's partitions", plan.compact(p), parts_cls)
            topic = new(topic_cls)
            s_name(topic, name)
            s_tid(topic, tid)
            s_parts(topic, p)
        if ids is None or names is None:
            ids, names = by_id.mutate(), ids_by_name.mutate()
        if is_created:
            holder = names.get(name)
            if holder is not None and holder != tid:
                raise plan.error_cls(f"Topic name {name} is taken by topic id {holder}: it cannot also "
                                     f"name topic id {tid}")
            prev = ids.get(tid)
            if prev is not None and g_name(prev) != name:
                raise plan.error_cls(f"Topic id {tid} is topic {g_name(prev)}: a TopicRecord cannot rename it "
                                     f"to {name}")
            names[name] = tid
            touched_names = True
        ids[tid] = topic
        touched_ids = True
    if ids is None or names is None:
        return by_id, ids_by_name
    new_ids, new_names = ids.finish(), names.finish()
    # a map nothing was written to is returned itself
    return (new_ids if touched_ids else by_id), (new_names if touched_names else ids_by_name)
