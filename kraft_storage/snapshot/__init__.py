"""KRaft snapshots (``.checkpoint`` files): naming and lifecycle, raw bytes, records.

* :mod:`.files` -- ``SnapshotId``, file names, listing, ``.part``/``.deleted`` handling.
* :mod:`.raw` -- ``RawSnapshotWriter`` (append bytes, atomic ``freeze``) and
  ``RawSnapshotReader`` (size, byte slices for FetchSnapshot).
* :mod:`.records` -- ``RecordsSnapshotWriter`` (header, kraft.version/voters,
  bounded data batches, footer) and ``RecordsSnapshotReader`` (layout checks,
  columnar records); ``bootstrap.checkpoint`` helpers.
"""
from kraft_storage.snapshot.errors import SnapshotBatchTooLarge, SnapshotError, SnapshotPositionOutOfRange
from kraft_storage.snapshot.files import (
    BOOTSTRAP_FILENAME,
    BOOTSTRAP_SNAPSHOT_ID,
    DELETED_SUFFIX,
    PARTIAL_SUFFIX,
    SUFFIX,
    SnapshotId,
    SnapshotPath,
    clean_snapshot_dir,
    delete_snapshot,
    latest_snapshot,
    list_snapshots,
    mark_for_delete,
    open_snapshot_dir,
    parse_snapshot_path,
    scan_snapshot_dir,
    snapshot_filename,
    snapshot_path,
)
from kraft_storage.snapshot.raw import RawSnapshotReader, RawSnapshotWriter
from kraft_storage.snapshot.records import (
    MAX_BATCH_SIZE_BYTES,
    RecordsSnapshotReader,
    RecordsSnapshotWriter,
    read_bootstrap_checkpoint,
    write_bootstrap_checkpoint,
)

__all__ = [
    "SnapshotError", "SnapshotBatchTooLarge", "SnapshotPositionOutOfRange", "SnapshotId",
    "SnapshotPath", "BOOTSTRAP_SNAPSHOT_ID", "BOOTSTRAP_FILENAME", "SUFFIX", "PARTIAL_SUFFIX",
    "DELETED_SUFFIX", "snapshot_filename", "snapshot_path", "parse_snapshot_path",
    "scan_snapshot_dir", "list_snapshots", "latest_snapshot", "mark_for_delete", "delete_snapshot",
    "clean_snapshot_dir", "open_snapshot_dir", "RawSnapshotWriter", "RawSnapshotReader", "RecordsSnapshotWriter",
    "RecordsSnapshotReader", "MAX_BATCH_SIZE_BYTES", "read_bootstrap_checkpoint",
    "write_bootstrap_checkpoint",
]
