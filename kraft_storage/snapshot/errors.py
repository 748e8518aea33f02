"""Errors about snapshot files (bad layout, misuse of a writer, bad FetchSnapshot position)."""
from __future__ import annotations

from kraft_storage.errors import KraftStorageError


class SnapshotError(KraftStorageError):
    """A snapshot file is not laid out as a KRaft snapshot, or a snapshot object was misused.

    The message names the file (or snapshot id) and, when it is about bytes,
    the position and batch base offset.
    """


class SnapshotPositionOutOfRange(SnapshotError):
    """A raw read asked for a position outside ``[0, size)`` (FetchSnapshot's POSITION_OUT_OF_RANGE)."""


class SnapshotBatchTooLarge(SnapshotError):
    """Records given to one ``append`` cannot fit in one batch of the writer's ``max_batch_size``."""
