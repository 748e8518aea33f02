# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Timeline collections, native (Cython) implementation.

Same API and semantics as the pure-Python twin ``kraft_storage._pure._timeline``
(read its docstring first: it is the specification, with the invariants).
This module only changes *how* the data is stored, to make single-op calls
cheap and memory close to a ``dict``:

Hash table layout (``Table``), a compact open-addressing table like CPython's
dict::

    index[capacity]   int32 per slot: -1 empty, -2 deleted, else entry number
    entries[usable]   dense array, in insertion order, of 24-byte Entry:
        PyObject* key      (NULL once deleted: a hole until the next resize)
        PyObject* value    (NULL for sets)
        int64     start    (start epoch: registry.latest_epoch + 1 at write time)
    hashes[usable]    uint32 per entry: the key's hash folded to 32 bits
                      (cached apart from ``entries`` so an element costs
                      28 + 6 bytes: <= 2x even a str-keyed dict, whose
                      entries are 16 bytes; compares and resizes never call
                      ``__hash__`` again)

    capacity is a power of two, usable = capacity * 2 / 3; probing follows
    i = 5*i + 1 + perturb, perturb >>= 5 (all hash bits take part).

A table owns one reference to every non-NULL key and value in ``entries``.
Every structural change (insert, delete, resize, clear) bumps ``version``;
code that may have run arbitrary Python (``__eq__``, ``__hash__``, list
appends that trigger GC) re-checks ``version`` before trusting an entry index.
References are dropped only once the table is consistent again, because a
``__del__`` may re-enter the table.

The same ``Table`` stores the ``saved`` part of each snapshot tier.

Bulk calls (``put_many``, ``get_many``, ``contains_many`` at LATEST) run one
tight C loop for keys that are exact ``int``/``str`` (hashing and comparing
those runs no Python code, so the loop needs no per-key reference or version
check) or a 1-d int64 numpy array (hashed from the C value, as
``hash(int(v))``); a key of any other type, or a hash match against a stored
key of another type (``True`` vs ``1``), is handed alone to the single-op
path.  See "Bulk probes" and the bulk paths of ``_SnapshottableHashTable``.

Source layout: this file keeps the module's imports, its public names
(``__all__``) and the import-time int-hash check of the bulk probes; the code is
in ``.pxi`` files next to it, included in this order (as asyncpg does):

    _timeline_table.pxi        C helpers, constants, Entry/Table, primitives, bulk probes
    _timeline_registry.pxi     Snapshot, _Revertable, SnapshotRegistry
    _timeline_hashtable.pxi    _HashTier, _SnapshottableHashTable (the map/set engine)
    _timeline_collections.pxi  TimelineHashMap, TimelineHashSet, the Timeline scalars
    _timeline_grouped.pxi      put_grouped: a reverse index's groups put in one C pass
    _timeline_gc.pxi           cycle-collector hooks of the Table-owning types
"""
from cpython.ref cimport PyObject
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.list cimport PyList_New
cimport cython
from libc.stdint cimport int64_t, int32_t, uint32_t, uint64_t, INT64_MAX, INT64_MIN, INT32_MAX, INT32_MIN
from libc.string cimport memset

import weakref

from kraft_storage._common import LATEST_EPOCH, NO_SNAPSHOT_EPOCH
from kraft_storage.errors import SnapshotEpochError, SnapshotNotFoundError

include "_timeline_table.pxi"
include "_timeline_registry.pxi"
include "_timeline_hashtable.pxi"
include "_timeline_collections.pxi"
include "_timeline_grouped.pxi"


__all__ = [
    "LATEST_EPOCH", "NO_SNAPSHOT_EPOCH", "Snapshot", "SnapshotRegistry",
    "SnapshotNotFoundError", "SnapshotEpochError", "TimelineHashMap",
    "TimelineHashSet", "TimelineLong", "TimelineInteger", "TimelineObject",
    "put_grouped",
]


include "_timeline_gc.pxi"


def _check_int_hash():
    import sys
    global _INT_HASH_IS_MOD61
    _INT_HASH_IS_MOD61 = (sys.hash_info.width == 64
                          and sys.hash_info.modulus == (1 << 61) - 1
                          and sizeof(Py_hash_t) == 8)


_check_int_hash()
