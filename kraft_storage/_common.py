"""Constants and helpers shared by a kernel twin pair and its callers (a leaf module).

The twins in ``kraft_storage/_native`` and ``kraft_storage/_pure`` are leaves:
they import nothing above them (no ``kraft_storage.log``, ``record``,
``snapshot``, ``messages``, ``spark``, ``tools``, ``timeline``, no
``kraft_node``; ``tests/storage/test_twin_contracts.py`` enforces it).  What a kernel
shares with its caller or with its twin lives here or, for error classes, in
:mod:`kraft_storage.errors`; this module imports only the standard library and
numpy, never another ``kraft_storage`` module.

The callers keep importing these names from where they always did
(``kraft_storage.record.BATCH_DTYPE``, ``kraft_storage.timeline.LATEST_EPOCH``,
``kraft_storage._pure._timeline.LATEST_EPOCH``...): those modules re-export them.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

__all__ = ["BATCH_DTYPE", "LATEST_EPOCH", "NO_SNAPSHOT_EPOCH", "as_fd", "zigzag_varint"]

# -- record batches (kernels ``_batch`` and ``_logappend``; ``kraft_storage.record.batch``)

#: One scanned batch header.  Mirrors ``kr_batch_header`` in csrc/recordbatch.h
#: (72 bytes, C layout): the native ``_batch.scan`` fills it with memcpy.
BATCH_DTYPE = np.dtype([
    ("position", "<i8"), ("base_offset", "<i8"), ("base_timestamp", "<i8"),
    ("max_timestamp", "<i8"), ("producer_id", "<i8"),
    ("size", "<i4"), ("last_offset_delta", "<i4"), ("partition_leader_epoch", "<i4"),
    ("base_sequence", "<i4"), ("records_count", "<i4"), ("crc", "<u4"),
    ("attributes", "<i2"), ("producer_epoch", "<i2"),
    ("magic", "i1"), ("crc_valid", "i1"), ("_pad", "<i2"),
], align=True)
assert BATCH_DTYPE.itemsize == 72

# -- timeline (kernel ``_timeline``; ``kraft_storage.timeline``)

#: Reads at this epoch see the current state (Kafka's ``Long.MAX_VALUE``).
LATEST_EPOCH: int = (1 << 63) - 1
#: Epoch reported by ``SnapshotRegistry.latest_epoch`` when there is no
#: snapshot (Kafka's ``Long.MIN_VALUE`` head sentinel).
NO_SNAPSHOT_EPOCH: int = -(1 << 63)

# -- fdatasync jobs (kernel ``_fdsync``; ``kraft_storage.log.fdsync``)


def as_fd(f: Any) -> int:
    """``f`` as a file descriptor (any ``__index__`` but a bool), else TypeError.

    The one argument check of both ``_fdsync`` twins."""
    if not isinstance(f, bool):
        try:
            return operator.index(f)
        except TypeError:
            pass
    raise TypeError(f"a file descriptor must be an int, not {type(f).__name__}")


# -- varints (Kafka's record format: the pure twin ``_batch`` and the convenience builder)

def zigzag_varint(v: int, bits: int) -> bytes:
    """Kafka's zig-zag varint of a signed ``bits``-bit value (32: varint, 64: varlong)."""
    u = ((v << 1) ^ (v >> (bits - 1))) & ((1 << bits) - 1)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)

