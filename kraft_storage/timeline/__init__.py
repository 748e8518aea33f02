"""Kafka's timeline collections: in-memory state that can be read as of a
snapshot epoch and reverted to it.

The KRaft controller applies records to memory as soon as they are written,
before they commit.  Taking a :class:`SnapshotRegistry` snapshot at each write
offset lets it serve committed reads (``get(key, epoch=committed_offset)``)
while uncommitted writes pile up, and throw them all away with
``revert_to_snapshot(last_stable_offset)`` when it loses leadership.

Usage::

    registry = SnapshotRegistry()
    topics = TimelineHashMap(registry)      # also TimelineHashSet,
    topics["foo"] = 1                       # TimelineLong, TimelineInteger,
    registry.get_or_create_snapshot(100)    # TimelineObject
    topics["foo"] = 2
    topics.get("foo", epoch=100)   # -> 1
    registry.revert_to_snapshot(100)
    topics["foo"]                  # -> 1

Every class here *is* the implementation class (native Cython when built,
else the pure-Python twin; see :mod:`kraft_storage.accel`), with no wrapper
in between, so single-op calls cost one method call.  Objects from the two
implementations must not be mixed (a native map needs a native registry).

Semantics follow ``org.apache.kafka.timeline`` (SnapshotRegistry,
SnapshottableHashTable and friends) with these Python-side choices:

* ``LATEST_EPOCH`` (2**63 - 1) reads the current state; reading at any other
  epoch requires a live snapshot there (else :class:`SnapshotNotFoundError`).
* snapshot epochs never decrease (:class:`SnapshotEpochError`), except that a
  revert to ``E`` or a ``reset()`` allows new snapshots from ``E`` on again.
* ``None`` is a valid value; ``get`` has a ``default`` and a keyword-only ``epoch``.
* iteration at ``LATEST_EPOCH`` is live (a structural change raises
  RuntimeError); iteration at a snapshot epoch returns a list, so it can be
  kept while the current state changes.  Iteration order is unspecified.
* ``TimelineLong``/``TimelineInteger`` raise OverflowError where Java wraps.
"""
from typing import TYPE_CHECKING, cast

from kraft_storage.accel import load as _load

if TYPE_CHECKING:
    from kraft_storage._contracts import TimelineKernel

_module = _load("_timeline")
_impl = cast("TimelineKernel", _module)

LATEST_EPOCH = _impl.LATEST_EPOCH
NO_SNAPSHOT_EPOCH = _impl.NO_SNAPSHOT_EPOCH
Snapshot = _impl.Snapshot
SnapshotRegistry = _impl.SnapshotRegistry
SnapshotNotFoundError = _impl.SnapshotNotFoundError
SnapshotEpochError = _impl.SnapshotEpochError
TimelineHashMap = _impl.TimelineHashMap
TimelineHashSet = _impl.TimelineHashSet
TimelineLong = _impl.TimelineLong
TimelineInteger = _impl.TimelineInteger
TimelineObject = _impl.TimelineObject
#: Fill a reverse index (key -> topic -> entries) from flat columns in one pass: see the
#: pure twin's docstring (``kraft_storage._pure._timeline.put_grouped``) for its contract.
put_grouped = _module.put_grouped

#: "native" or "pure": which implementation this process uses.
IMPLEMENTATION = "native" if _module.__name__.startswith("kraft_storage._native") else "pure"

__all__ = [
    "LATEST_EPOCH", "NO_SNAPSHOT_EPOCH", "Snapshot", "SnapshotRegistry",
    "SnapshotNotFoundError", "SnapshotEpochError", "TimelineHashMap",
    "TimelineHashSet", "TimelineLong", "TimelineInteger", "TimelineObject",
    "IMPLEMENTATION", "put_grouped",
]
