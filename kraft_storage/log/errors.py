"""Errors of the segmented log (all are :class:`KraftStorageError`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

# OutOfOrderAppend and DiskFullError are defined in the leaf kraft_storage.errors (the append
# kernels and kraft_storage.fileio raise them and may import nothing above them); re-exported
# here, where the log's callers have always caught them.
from kraft_storage.errors import DiskFullError as DiskFullError
from kraft_storage.errors import KraftStorageError
from kraft_storage.errors import OutOfOrderAppend as OutOfOrderAppend

if TYPE_CHECKING:
    from os import PathLike


class OffsetOutOfRange(KraftStorageError):
    """A read asked for an offset outside ``[start_offset, end_offset]``.

    ``end_offset`` itself is a valid fetch offset (it returns no data), as in
    Kafka, so the valid range is closed on both ends.
    """

    def __init__(self, offset: int, start_offset: int, end_offset: int, what: str = "fetch offset"):
        self.offset = offset
        self.start_offset = start_offset
        self.end_offset = end_offset
        super().__init__(f"{what} {offset} is out of range: the log holds offsets "
                         f"[{start_offset}, {end_offset}) and accepts fetches from "
                         f"{start_offset} to {end_offset}")



class NotALogDirectory(KraftStorageError):
    """The path is not a Kafka partition log directory (or holds foreign files where segments belong)."""

    def __init__(self, path: str | PathLike[str], reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{path}: not a log directory: {reason}")


class LogClosed(KraftStorageError):
    """The log was closed (or its directory deleted) and cannot serve this call."""


class RecordBatchTooLargeError(KraftStorageError):
    """Kafka's ``RecordBatchTooLargeException``: an append larger than ``segment.bytes``.

    Kafka's ``UnifiedLog.append`` refuses it before anything is written (a
    segment must be able to hold any one append), and so does
    :meth:`KafkaLog.append_as_leader`/``append_as_follower``: the log is unchanged."""

    def __init__(self, size: int, directory: str | PathLike[str], segment_bytes: int) -> None:
        self.size = size
        self.segment_bytes = segment_bytes
        super().__init__(f"Message batch size is {size} bytes in append to partition {directory} which "
                         f"exceeds the maximum configured segment size of {segment_bytes}.")



class SegmentContiguityError(KraftStorageError):
    """Two adjacent segments whose offsets do not meet: the next segment's base offset is
    not the previous segment's next offset (a gap: offsets are missing; an overlap: two
    files hold the same offsets).  The metadata log is never compacted, so either means
    that files were removed, copied or renamed by hand."""

    def __init__(self, directory: str | PathLike[str], prev_file: str, prev_next_offset: int, next_file: str,
                 next_base: int) -> None:
        self.directory = str(directory)
        self.prev_file = prev_file
        self.next_file = next_file
        self.prev_next_offset = prev_next_offset
        self.next_base = next_base
        kind = "gap" if next_base > prev_next_offset else "overlap"
        detail = (f"offsets [{prev_next_offset}, {next_base}) are missing" if kind == "gap"
                  else f"offsets [{next_base}, {prev_next_offset}) are in both files")
        super().__init__(f"{directory}: segments are not contiguous ({kind}): {prev_file} ends before "
                         f"offset {prev_next_offset} but the next segment {next_file} starts at {next_base}; "
                         f"{detail}. Inspect it with `kraft-storage verify`; `kraft-storage recover` "
                         f"keeps the log up to the {kind} and deletes the segments from {next_file} on")


class CorruptCleanLogError(KraftStorageError):
    """Corruption in a log whose clean-shutdown marker was present.

    A clean shutdown flushed everything, so bad bytes are not a torn write that
    recovery may cut: they are damage (disk, a hand edit, a copy gone wrong), and
    truncating would silently drop acknowledged records.  ``KafkaLog.open`` refuses
    and changes nothing; ``recover_clean=True`` (the ``recover`` tool) truncates."""

    def __init__(self, directory: str | PathLike[str], file: str, position: int, base_offset: int | None,
                 reason: str) -> None:
        self.directory = str(directory)
        self.file = file
        self.position = position
        self.base_offset = base_offset
        self.reason = reason
        at = f"byte position {position}" + (f", batch base offset {base_offset}" if base_offset is not None else "")
        super().__init__(f"{file}: corrupt log at {at}: {reason}; the log was shut down cleanly, so this "
                         f"is not a torn write; inspect it with `kraft-storage verify` and, to truncate at "
                         f"the corruption, run `kraft-storage recover`")


class SegmentBaseOffsetMismatch(SegmentContiguityError):
    """A segment whose first batch does not start at the base offset its file name says
    (a segment renamed, or copied from another log).  Kraft and Kafka start every
    segment at the log end offset, so the two always agree in a metadata log."""

    def __init__(self, directory: str | PathLike[str], file: str, base: int, first_offset: int) -> None:
        self.directory = str(directory)
        self.prev_file = self.next_file = file
        self.prev_next_offset = base
        self.next_base = first_offset
        KraftStorageError.__init__(
            self, f"{directory}: segment {file} is named for base offset {base} but its first batch starts at "
                  f"offset {first_offset}: the file was renamed or copied from another log. Inspect it with "
                  f"`kraft-storage verify`; `kraft-storage recover` keeps the log before {file} and deletes "
                  f"the segments from it on")
