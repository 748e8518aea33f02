"""Folding a delta's pending changes into a persistent map (the step every sub-delta's ``apply`` shares).

Why one function: Kafka's deltas keep ``changes: key -> Optional<value>`` (empty: removed) and
``apply`` copies the image's whole map, then patches it.  Here the image's maps are
``immutables.Map`` (a HAMT), so ``apply`` patches only the changed keys, O(changes * log n), and
everything else -- the untouched entries *and* the map itself when nothing really changed -- is
shared with the previous image by identity.

Invariant kept by :func:`apply_changes`: the result holds no ``None`` value (``None`` in
``changes`` means "remove"), and it *is* ``base`` when applying ``changes`` leaves every entry as
it was (an equal value replacing an entry keeps the old object, so readers comparing by identity
see no change).

The sub-images built on these maps are immutable by construction: their state sits in private
slots behind read-only properties (no setters) and is never changed after ``__init__`` (no
``__setattr__`` guard: an image per config resource is built on the load path, and the guard
would double its cost).

Readers beware: an ``immutables.Map`` never compares equal to a ``dict`` (``Map({1: 2}) == {1: 2}``
is False); compare ``dict(m) == d``, or two Maps.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import immutables

__all__ = ["EMPTY_MAP", "apply_changes", "freeze"]

K = TypeVar("K")
V = TypeVar("V")

_MISSING = object()
#: the empty map every image starts from (one object: an empty image shares it)
EMPTY_MAP: immutables.Map[Any, Any] = immutables.Map()


def apply_changes(base: immutables.Map[K, V], changes: Mapping[K, V | None]) -> immutables.Map[K, V]:
    """``base`` with each ``changes[k]`` set (``None``: ``k`` removed); ``base`` itself if nothing changes."""
    if not changes:
        return base
    if not base:  # a new map (a snapshot load, a new resource): one build, no mutation
        data = {key: value for key, value in changes.items() if value is not None}
        return immutables.Map(data) if data else base
    changed = False
    with base.mutate() as mm:
        for key, value in changes.items():
            if value is None:
                if key in mm:
                    del mm[key]
                    changed = True
            else:
                old = mm.get(key, _MISSING)
                if old is not value and old != value:
                    mm[key] = value
                    changed = True
        result = mm.finish()
    return result if changed else base


def freeze(data: Mapping[K, V] | None) -> immutables.Map[K, V]:
    """An ``immutables.Map`` of ``data`` (the object itself when it already is one)."""
    if data is None:
        return EMPTY_MAP
    if isinstance(data, immutables.Map):
        return data
    return immutables.Map(data)
