"""The contract of each kernel twin pair: what ``kraft_storage._native.X`` and ``kraft_storage._pure.X`` both provide.

Every kernel has two implementations with one API (the Cython build and its
pure-Python twin; :mod:`kraft_storage.accel` picks one per process).  This
module states that API once per pair, as a :class:`typing.Protocol` the
*module* satisfies, and ``tests/storage/test_twin_contracts.py`` checks both twins
against it (names, parameter names and kinds, defaults, constants equal in
both, classes constructible with the documented arguments).  The RPC codecs of
``kraft_node`` have theirs in :mod:`kraft_node._contracts`.

Why Protocols and not ``.pyi`` stubs:

* one stub describes one module, and the twins are two modules: a stub per
  module would say everything twice (and a ``.pyi`` beside ``_pure/X.py``
  would hide the real source from mypy), where one Protocol names the pair;
* a Protocol is an object at run time: the test walks it and compares both
  twins with it, so the contract cannot drift from the code unseen (a stub
  is only read by a type checker, which cannot look inside a ``.so``);
* mypy accepts a module where a Protocol is expected (PEP 544, "modules as
  implementations of protocols"), so a facade can write
  ``_k: BatchKernel = load("_batch")`` when it is typed.

How to read it.  In a module Protocol (``...Kernel``), a method is a module
function (``self`` stands for the module and is not passed); an annotation is
a constant, equal in both twins; a read-only property is a module attribute
holding a class: ``type[P]`` with ``P`` a Protocol (named ``<Class>Like``) is a
class whose constructor is ``P.__init__`` and whose instances have ``P``'s
methods and properties; with ``P`` a concrete class, a subclass of it.
(Properties, not annotations, because a Protocol's plain attribute is settable,
and mypy would then require the very same class in both twins.)  Defaults are
part of the contract; ``...`` marks a private sentinel.  Names a caller does
not use (helpers, cdef internals, the pure oracle's extras such as
``_batch.write_varint``) are not in it.

``TWINS`` maps each kernel name to its Protocol.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, Self

import numpy as np

from kraft_storage._common import LATEST_EPOCH
from kraft_storage.errors import SnapshotEpochError, SnapshotNotFoundError
from kraft_storage.messages.runtime import GeneratedMessage

__all__ = [
    "TWINS", "BatchKernel", "Crc32cKernel", "FdsyncKernel", "FrameKernel", "IndexKernel", "LogAppendKernel",
    "MessagesMetadataKernel", "MetadataColumnsKernel", "TimelineKernel",
]


# ---------------------------------------------------------------- _batch


class RecordLike(Protocol):
    """One decoded record (convenience APIs only, never the replay hot path)."""

    @property
    def offset(self) -> int:
        """The record's offset."""

    @property
    def timestamp(self) -> int:
        """The record's timestamp (ms)."""

    @property
    def key(self) -> bytes | None:
        """The key (None: null)."""

    @property
    def value(self) -> bytes | None:
        """The value (None: null)."""

    @property
    def headers(self) -> tuple[tuple[bytes | None, bytes | None], ...]:
        """``((key, value), ...)``."""

    @property
    def attributes(self) -> int:
        """The record's attribute byte."""

    def __init__(self, offset: int, timestamp: int, key: bytes | None, value: bytes | None,
                 headers: tuple[tuple[bytes | None, bytes | None], ...],
                 attributes: int = 0) -> None:
        """A record with these fields (``attributes``: the record's own attribute byte)."""


class BatchKernel(Protocol):
    """``_batch``: walk, decode and encode Kafka v2 record batches (callers: ``kraft_storage.record``)."""

    OK: int
    """scan/decode status: the range was walked to its end."""
    TRUNCATED: int
    """scan/decode status: a batch is cut off by the end of the range."""
    CORRUPT: int
    """scan/decode status: a batch is malformed (message and position returned)."""
    CAPACITY: int
    """scan status: ``out`` is full; call again from the returned position."""
    NO_OFFSET: int
    """``err_base_offset`` when the bad batch's base offset could not be read (int64 min)."""
    CRC_SKIP: int
    """crc_mode: do not compute CRCs."""
    CRC_VERIFY: int
    """crc_mode: stop at the first batch whose CRC-32C is wrong."""
    CRC_REPORT: int
    """crc_mode: compute every CRC, record it in ``crc_valid``, keep going."""
    HEADER_SIZE: int
    """Bytes of a v2 batch header (61)."""

    @property
    def Record(self) -> type[RecordLike]:
        """The record class of :meth:`make_records` / :meth:`iter_records`."""

    def scan(self, buf: Any, start: int, end: int, crc_mode: int, max_batch_size: int,
             out: np.ndarray) -> tuple[int, int, int, str | None, int, int]:
        """Walk batches of ``buf[start:end]`` into ``out`` (BATCH_DTYPE);
        ``(status, n, next_pos, message, err_position, err_base_offset)``."""

    def decode_records(self, buf: Any, headers: np.ndarray, region_start: Any, region_end: Any, batch_row: Any,
                       cols: tuple[Any, ...], first_row: int) -> tuple[int, int, str | None, int, int]:
        """Decode the records of each batch row of ``headers`` into the column arrays ``cols``;
        ``(status, n, message, err_position, err_base_offset)``."""

    def encode_records(self, lo: int, hi: int, keys: Any, key_off: Any, key_null: Any, vals: Any, val_off: Any,
                       val_null: Any, ts: Any, base_ts: int) -> bytes:
        """The records section of records ``[lo, hi)`` of one batch."""

    def encode_batches(self, keys: Any, key_off: Any, key_null: Any, vals: Any, val_off: Any, val_null: Any, ts: Any,
                       default_ts: int, per_batch: int, base_offset: int, partition_leader_epoch: int,
                       attributes: int, producer_id: int, producer_epoch: int, base_sequence: int,
                       out: Any = None) -> tuple[Any, np.ndarray]:
        """Uncompressed batches of at most ``per_batch`` records:
        ``(bytes, positions)``, or ``(nbytes, positions)`` written into ``out``."""

    def write_batch(self, records: bytes, base_offset: int, partition_leader_epoch: int, attributes: int,
                    last_offset_delta: int, base_ts: int, max_ts: int, producer_id: int, producer_epoch: int,
                    base_sequence: int, records_count: int) -> bytes:
        """One whole batch: the header (with its CRC-32C) and the given records section."""

    def pack_bytes(self, items: Any) -> tuple[bytes, np.ndarray] | None:
        """``(joined bytes, int64 offsets[n + 1])`` of a sequence of exactly-``bytes`` items, else None."""

    def parse_headers(self, buf: Any, pos: int, count: int) -> tuple[tuple[bytes | None, bytes | None], ...]:
        """The ``count`` record headers at ``buf[pos:]`` as ``((key, value), ...)``."""

    def make_records(self, buf: Any, cols: tuple[Any, ...], lo: int, hi: int) -> list[RecordLike]:
        """:class:`Record` objects for rows ``[lo, hi)`` of decoded columns over ``buf``."""

    def iter_records(self, buf: Any, cols: tuple[Any, ...], lo: int, hi: int) -> Iterator[RecordLike]:
        """The same records as :meth:`make_records`, one at a time."""


# ---------------------------------------------------------------- _crc32c


class Crc32cKernel(Protocol):
    """``_crc32c``: CRC-32C (Castagnoli) of any C-contiguous buffer (caller: ``kraft_storage.crc32c``)."""

    def crc32c(self, data: Any, crc: int = 0) -> int:
        """CRC-32C of ``data``, continuing from ``crc`` (``crc32c(b, crc32c(a)) == crc32c(a + b)``)."""

    def crc32c_portable(self, data: Any, crc: int = 0) -> int:
        """The same value by the portable algorithm (the oracle in tests and benchmarks)."""

    def impl(self) -> str:
        """Name of the algorithm in use, e.g. ``native:sse42-3way`` or ``pure:table``."""


# ---------------------------------------------------------------- _fdsync


class AsyncFdatasyncLike(Protocol):
    """fdatasync jobs completed in the background; an eventfd counts completions."""

    @property
    def native(self) -> bool:
        """True for the Linux AIO build, False for the thread twin."""

    @property
    def in_flight(self) -> int:
        """Jobs submitted and not yet reaped."""

    def __init__(self, depth: int = 64) -> None:
        """Room for ``depth`` descriptors in flight (OSError where the native AIO context cannot be set up)."""

    def submit(self, fds: Any, token: Any) -> None:
        """Start fdatasync of every descriptor of ``fds``; the job completes with ``token`` (never blocks)."""

    def reap(self) -> list[tuple[Any, OSError | None]]:
        """``[(token, OSError | None), ...]`` of the jobs finished since the last call."""

    def fileno(self) -> int:
        """The eventfd: readable when :meth:`reap` has something."""

    def close(self) -> None:
        """Wait for the jobs in flight, then release the context and the eventfd."""

    def __enter__(self) -> Self:
        """Itself."""

    def __exit__(self, *exc: object) -> Any:
        """:meth:`close`."""


class FdsyncKernel(Protocol):
    """``_fdsync``: asynchronous fdatasync (caller: ``kraft_storage.log.fdsync``)."""

    @property
    def AsyncFdatasync(self) -> type[AsyncFdatasyncLike]:
        """The job queue (native: Linux AIO; pure: a worker thread)."""


# ---------------------------------------------------------------- _frame


class FrameKernel(Protocol):
    """``_frame``: metadata record frames in bulk
    (callers: ``kraft_storage.spark``, ``.messages.columns``, ``.tools``)."""

    MAX_FRAME_INT: int
    """Largest apiKey/version a frame may carry (int16 max)."""

    def read_frames(self, data: Any, value_pos: Any, value_len: Any, api_key: Any, version: Any,
                    body_pos: Any) -> int:
        """Fill ``api_key``/``version`` (int16) and ``body_pos`` (int64) of every value; returns how many are frames."""

    def gather(self, data: Any, pos: Any, length: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
        """Copy the slices ``data[pos:pos+length]`` out:
        ``(uint8 data, int32 offsets[n + 1], validity bitmap or None, null count)``."""


# ---------------------------------------------------------------- _index


class IndexSearcherLike(Protocol):
    """Binary search over a memory-mapped offset or time index."""

    n: int
    """Valid entries (the index sets it when it appends or truncates)."""

    @property
    def capacity(self) -> int:
        """Entries the buffer can hold."""

    def __init__(self, buf: Any, base_offset: int, kind: str, n: int = 0) -> None:
        """Search the first ``n`` entries of ``buf`` (None: empty), a ``kind`` ("offset" or "time")
        index of the segment at ``base_offset``."""

    def release(self) -> None:
        """Drop the reference to the buffer (before the mmap closes)."""

    def entry(self, slot: int) -> tuple[int, int]:
        """The entry at ``slot``, absolute: ``(offset, position)`` or ``(timestamp, offset)``."""

    def offset_slot(self, offset: int) -> int:
        """Slot of the last entry whose offset is <= ``offset`` (-1: none)."""

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry at or before ``offset`` (the segment start when none)."""

    def position_slot(self, position: int) -> int:
        """Slot of the last entry whose position is <= ``position`` (-1: none)."""

    def lookup_many(self, offsets: Any, out_offsets: Any, out_positions: Any) -> None:
        """:meth:`lookup` for every offset of ``offsets``, into the two output arrays."""

    def time_slot(self, timestamp: int) -> int:
        """Slot of the first time entry whose timestamp is >= ``timestamp`` (-1: none)."""

    def time_lookup(self, timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the time entry for ``timestamp``, as Kafka's TimeIndex.lookup."""


class IndexKernel(Protocol):
    """``_index``: segment index search and planning (callers: ``kraft_storage.log.index``, ``.log.segment``)."""

    OFFSET_ENTRY_SIZE: int
    """Bytes of an offset index entry (8: relative offset, position)."""
    TIME_ENTRY_SIZE: int
    """Bytes of a time index entry (12: timestamp, relative offset)."""

    @property
    def IndexSearcher(self) -> type[IndexSearcherLike]:
        """The searcher."""

    @property
    def FileMap(self) -> Callable[[int, int, bool], Any]:
        """``FileMap(fd, length, writable)``: a shared mapping of ``length`` (> 0) bytes of the file
        open on ``fd``: buffer protocol (writable if ``writable``), contiguous slice reads and
        assignments, ``flush()`` (msync), ``close()`` (``BufferError`` while a buffer is
        exported), ``closed``, ``len()``.  The native one keeps no descriptor once made (the
        caller may close ``fd``)."""

    def plan_entries(self, positions: Any, sizes: Any, last_offsets: Any, max_timestamps: Any, base_offset: int,
                     interval: int, bytes_since: int, max_ts: int, offset_of_max_ts: int, last_time_ts: int,
                     out_off_rel: Any, out_off_pos: Any, out_ts: Any,
                     out_ts_rel: Any) -> tuple[int, int, int, int, int, int]:
        """Index entries a run of batches adds (Kafka 4's per-batch rule);
        ``(n_offset, n_time, bytes_since, max_ts, offset_of_max_ts, last_time_ts)``."""


# ---------------------------------------------------------------- _logappend


class AppenderLike(Protocol):
    """One append in two calls, scan then write (see ``kraft_storage._pure._logappend``)."""

    @property
    def mode(self) -> int:
        """Mode of the last scan (MODE_LEADER or MODE_FOLLOWER)."""

    @property
    def leader_epoch(self) -> int:
        """Leader epoch of the last scan."""

    @property
    def batches(self) -> int:
        """Batches scanned."""

    @property
    def nbytes(self) -> int:
        """Bytes scanned."""

    @property
    def records(self) -> int:
        """Records in the scanned batches."""

    @property
    def first_offset(self) -> int:
        """Base offset of the first batch (after assignment)."""

    @property
    def last_offset(self) -> int:
        """Last offset of the last batch."""

    @property
    def max_timestamp(self) -> int:
        """Max timestamp over the batches."""

    @property
    def first_max_timestamp(self) -> int:
        """The first batch's max timestamp (segment rolling)."""

    @property
    def epochs(self) -> tuple[tuple[int, int], ...]:
        """``(epoch, start_offset)`` pairs the leader-epoch cache must learn, in order."""

    def __init__(self) -> None:
        """An appender with scratch space, for one writer."""

    def scan(self, buf: Any, mode: int, next_offset: int, leader_epoch: int, latest_epoch: int,
             crc_mode: int) -> None:
        """Validate every batch of ``buf``, then assign offsets (leader) or check them (follower: OutOfOrderAppend)."""

    def write(self, fd: int, start: int, segment_base: int, interval: int, bytes_since: int, max_ts: int,
              offset_of_max_ts: int, offset_buf: Any, offset_n: int, offset_max: int, time_buf: Any, time_n: int,
              time_max: int) -> tuple[int, int, int, int, int]:
        """Write the scanned batches at ``start``, then their index entries;
        ``(offset_n, time_n, bytes_since, max_ts, offset_of_max_ts)``."""

    def release(self) -> None:
        """Drop the reference to the scanned buffer."""


class LogAppendKernel(Protocol):
    """``_logappend``: the whole append to a segment (caller: ``kraft_storage.log.log``)."""

    MODE_LEADER: int
    """scan mode: assign offsets from ``next_offset`` and stamp ``leader_epoch``."""
    MODE_FOLLOWER: int
    """scan mode: check the batches continue the log."""
    SOURCE: str
    """The ``source`` that CorruptRecordError names ("appended records")."""

    @property
    def Appender(self) -> type[AppenderLike]:
        """The appender."""


# ---------------------------------------------------------------- _messages_metadata


class MetadataRecord(GeneratedMessage, Protocol):
    """A metadata log record class."""

    API_KEY: int


class MessagesMetadataKernel(Protocol):
    """``_messages_metadata``: the metadata record codecs, apiKey 0-28 (caller: ``kraft_storage.messages.metadata``)."""

    @property
    def METADATA_RECORD_TYPES(self) -> dict[int, type[MetadataRecord]]:
        """apiKey -> record class (the twins map the same keys to classes of the same names)."""

    @property
    def RegisterBrokerRecord(self) -> type[MetadataRecord]:
        """apiKey 0."""

    @property
    def UnregisterBrokerRecord(self) -> type[MetadataRecord]:
        """apiKey 1."""

    @property
    def TopicRecord(self) -> type[MetadataRecord]:
        """apiKey 2."""

    @property
    def PartitionRecord(self) -> type[MetadataRecord]:
        """apiKey 3."""

    @property
    def ConfigRecord(self) -> type[MetadataRecord]:
        """apiKey 4."""

    @property
    def PartitionChangeRecord(self) -> type[MetadataRecord]:
        """apiKey 5."""

    @property
    def FenceBrokerRecord(self) -> type[MetadataRecord]:
        """apiKey 7."""

    @property
    def UnfenceBrokerRecord(self) -> type[MetadataRecord]:
        """apiKey 8."""

    @property
    def RemoveTopicRecord(self) -> type[MetadataRecord]:
        """apiKey 9."""

    @property
    def DelegationTokenRecord(self) -> type[MetadataRecord]:
        """apiKey 10."""

    @property
    def UserScramCredentialRecord(self) -> type[MetadataRecord]:
        """apiKey 11."""

    @property
    def FeatureLevelRecord(self) -> type[MetadataRecord]:
        """apiKey 12."""

    @property
    def ClientQuotaRecord(self) -> type[MetadataRecord]:
        """apiKey 14."""

    @property
    def ProducerIdsRecord(self) -> type[MetadataRecord]:
        """apiKey 15."""

    @property
    def BrokerRegistrationChangeRecord(self) -> type[MetadataRecord]:
        """apiKey 17."""

    @property
    def AccessControlEntryRecord(self) -> type[MetadataRecord]:
        """apiKey 18."""

    @property
    def RemoveAccessControlEntryRecord(self) -> type[MetadataRecord]:
        """apiKey 19."""

    @property
    def NoOpRecord(self) -> type[MetadataRecord]:
        """apiKey 20."""

    @property
    def ZkMigrationStateRecord(self) -> type[MetadataRecord]:
        """apiKey 21."""

    @property
    def RemoveUserScramCredentialRecord(self) -> type[MetadataRecord]:
        """apiKey 22."""

    @property
    def BeginTransactionRecord(self) -> type[MetadataRecord]:
        """apiKey 23."""

    @property
    def EndTransactionRecord(self) -> type[MetadataRecord]:
        """apiKey 24."""

    @property
    def AbortTransactionRecord(self) -> type[MetadataRecord]:
        """apiKey 25."""

    @property
    def RemoveDelegationTokenRecord(self) -> type[MetadataRecord]:
        """apiKey 26."""

    @property
    def RegisterControllerRecord(self) -> type[MetadataRecord]:
        """apiKey 27."""

    @property
    def ClearElrRecord(self) -> type[MetadataRecord]:
        """apiKey 28."""

    def decode_metadata_record(self, value: Any, offset: int | None = None) -> Any:
        """Decode one metadata record frame (``offset`` is named in errors)."""


# ---------------------------------------------------------------- _metadata_columns


class MetadataColumnsKernel(Protocol):
    """``_metadata_columns``: record bodies decoded into columns (caller: ``kraft_storage.messages.columns``)."""

    LAYOUTS: dict[int, Any]
    """apiKey -> (name, (lowest, highest version), buffers, layout tree, field names)."""
    ERRORS: dict[int, str]
    """Error code -> reason, for the ``(row, code, position, field)`` a decoder returns."""
    MAX_API_KEY: int
    """Highest apiKey with a decoder."""

    def decode_type(self, api_key: int, data: Any, body_pos: Any, body_end: Any, version: Any,
                    rows: Any) -> tuple[Any, Any]:
        """Decode the bodies of ``rows`` (all of type ``api_key``):
        ``(buffers in LAYOUTS order, None)`` or ``(None, error)``."""

    def decode_rows(self, data: Any, body_pos: Any, body_end: Any, api_key: Any, version: Any, rows: Any,
                    wanted: Any) -> tuple[Any, Any]:
        """Decode ``rows`` in row order, each by its type's decoder:
        ``({api_key: (rows, buffers)}, None)`` or ``(None, error)``."""


# ---------------------------------------------------------------- _timeline


class SnapshotLike(Protocol):
    """One in-memory snapshot: an epoch and the deltas recorded while it was the newest."""

    @property
    def epoch(self) -> int:
        """The snapshot's epoch."""

    @property
    def deltas(self) -> Any:
        """Collection -> its state before the changes made while this was the newest snapshot."""

    def __init__(self, epoch: int) -> None:
        """A snapshot at ``epoch``."""


class SnapshotRegistryLike(Protocol):
    """Ordered snapshots and the collections registered with them."""

    @property
    def latest_epoch(self) -> int:
        """Epoch of the newest snapshot (NO_SNAPSHOT_EPOCH: none)."""

    def __init__(self) -> None:
        """An empty registry."""

    def get_or_create_snapshot(self, epoch: int) -> SnapshotLike:
        """The snapshot at ``epoch``, taken now if there is none (SnapshotEpochError if older than the newest)."""

    def idempotent_create_snapshot(self, epoch: int) -> SnapshotLike:
        """:meth:`get_or_create_snapshot` under Kafka's name."""

    def get_snapshot(self, epoch: int) -> SnapshotLike:
        """The live snapshot at ``epoch`` (SnapshotNotFoundError otherwise)."""

    def has_snapshot(self, epoch: int) -> bool:
        """Whether a live snapshot is at ``epoch``."""

    def epochs(self) -> list[int]:
        """Epochs of the live snapshots, oldest first."""

    def revert_to_snapshot(self, epoch: int) -> None:
        """Undo every change made after the snapshot at ``epoch``; newer snapshots go."""

    def delete_snapshot(self, epoch: int) -> None:
        """Forget the snapshot at ``epoch`` (its deltas merge into the older one)."""

    def delete_snapshots_up_to(self, epoch: int) -> None:
        """Forget every snapshot older than ``epoch``."""

    def reset(self) -> None:
        """Forget every snapshot and clear every registered collection."""

    def __len__(self) -> int:
        """Number of live snapshots."""


class TimelineHashMapLike(Protocol):
    """A dict readable at any live snapshot epoch."""

    @property
    def registry(self) -> SnapshotRegistryLike:
        """The registry the map belongs to."""

    def __init__(self, registry: SnapshotRegistryLike, expected_size: int = 0) -> None:
        """An empty map registered with ``registry``."""

    def get(self, key: Any, default: Any = None, *, epoch: int = LATEST_EPOCH) -> Any:
        """The value of ``key`` at ``epoch``, else ``default``."""

    def get_many(self, keys: Iterable[Any], default: Any = None, *, epoch: int = LATEST_EPOCH) -> list[Any]:
        """:meth:`get` of every key, in one call."""

    def contains(self, key: Any, epoch: int = LATEST_EPOCH) -> bool:
        """Whether ``key`` is in the map at ``epoch``."""

    def contains_many(self, keys: Iterable[Any], epoch: int = LATEST_EPOCH) -> list[bool]:
        """:meth:`contains` of every key, in one call."""

    def put(self, key: Any, value: Any) -> Any:
        """Set ``key``; returns the previous value (None when there was none)."""

    def put_many(self, keys: Iterable[Any], values: Iterable[Any]) -> None:
        """:meth:`put` of every pair, in one call."""

    def update(self, other: Any = (), **kwargs: Any) -> None:
        """``dict.update``."""

    def remove(self, key: Any) -> Any:
        """Delete ``key``; returns its value (None when absent)."""

    def pop(self, key: Any, default: Any = ...) -> Any:
        """``dict.pop``."""

    def clear(self) -> None:
        """Remove every key."""

    def size(self, epoch: int = LATEST_EPOCH) -> int:
        """Number of keys at ``epoch``."""

    def is_empty(self, epoch: int = LATEST_EPOCH) -> bool:
        """Whether the map is empty at ``epoch``."""

    def keys(self, epoch: int = LATEST_EPOCH) -> Any:
        """Keys at ``epoch`` (live iterator at LATEST_EPOCH, else a list)."""

    def values(self, epoch: int = LATEST_EPOCH) -> Any:
        """Values at ``epoch`` (as :meth:`keys`)."""

    def items(self, epoch: int = LATEST_EPOCH) -> Any:
        """``(key, value)`` pairs at ``epoch`` (as :meth:`keys`)."""

    def to_dict(self, epoch: int = LATEST_EPOCH) -> dict[Any, Any]:
        """A plain dict of the map at ``epoch``."""

    def __getitem__(self, key: Any) -> Any:
        """The current value (KeyError when absent)."""

    def __setitem__(self, key: Any, value: Any) -> None:
        """:meth:`put`."""

    def __delitem__(self, key: Any) -> None:
        """Delete (KeyError when absent)."""

    def __contains__(self, key: Any) -> bool:
        """Current membership."""

    def __iter__(self) -> Iterator[Any]:
        """The current keys."""

    def __len__(self) -> int:
        """The current size."""


class TimelineHashSetLike(Protocol):
    """A set readable at any live snapshot epoch."""

    @property
    def registry(self) -> SnapshotRegistryLike:
        """The registry the set belongs to."""

    def __init__(self, registry: SnapshotRegistryLike, expected_size: int = 0) -> None:
        """An empty set registered with ``registry``."""

    def add(self, key: Any) -> bool:
        """Add ``key``; True when it was absent."""

    def add_many(self, keys: Iterable[Any]) -> int:
        """Add every key; returns how many were absent."""

    def remove(self, key: Any) -> bool:
        """Remove ``key``; True when it was present."""

    def discard(self, key: Any) -> None:
        """Remove ``key`` if present."""

    def clear(self) -> None:
        """Remove every key."""

    def contains(self, key: Any, epoch: int = LATEST_EPOCH) -> bool:
        """Whether ``key`` is in the set at ``epoch``."""

    def contains_many(self, keys: Iterable[Any], epoch: int = LATEST_EPOCH) -> list[bool]:
        """:meth:`contains` of every key, in one call."""

    def size(self, epoch: int = LATEST_EPOCH) -> int:
        """Number of keys at ``epoch``."""

    def is_empty(self, epoch: int = LATEST_EPOCH) -> bool:
        """Whether the set is empty at ``epoch``."""

    def keys(self, epoch: int = LATEST_EPOCH) -> Any:
        """Keys at ``epoch`` (live iterator at LATEST_EPOCH, else a list)."""

    def to_set(self, epoch: int = LATEST_EPOCH) -> set[Any]:
        """A plain set at ``epoch``."""

    def __contains__(self, key: Any) -> bool:
        """Current membership."""

    def __iter__(self) -> Iterator[Any]:
        """The current keys."""

    def __len__(self) -> int:
        """The current size."""


class TimelineIntegerLike(Protocol):
    """A 32-bit integer readable at any live snapshot epoch (OverflowError where Java wraps)."""

    @property
    def registry(self) -> SnapshotRegistryLike:
        """The registry the integer belongs to."""

    @property
    def value(self) -> int:
        """The current value."""

    def __init__(self, registry: SnapshotRegistryLike, value: int = 0) -> None:
        """An integer starting at ``value``."""

    def get(self, epoch: int = LATEST_EPOCH) -> int:
        """The value at ``epoch``."""

    def set(self, value: int) -> None:
        """Set the current value."""

    def increment(self) -> None:
        """Add one."""

    def decrement(self) -> None:
        """Subtract one."""


class TimelineLongLike(TimelineIntegerLike, Protocol):
    """A 64-bit integer readable at any live snapshot epoch (same API as TimelineInteger)."""


class TimelineObjectLike(Protocol):
    """Any value readable at any live snapshot epoch."""

    @property
    def registry(self) -> SnapshotRegistryLike:
        """The registry the object belongs to."""

    @property
    def value(self) -> Any:
        """The current value."""

    def __init__(self, registry: SnapshotRegistryLike, initial: Any) -> None:
        """An object holding ``initial`` (``reset()`` restores it)."""

    def get(self, epoch: int = LATEST_EPOCH) -> Any:
        """The value at ``epoch``."""

    def set(self, value: Any) -> None:
        """Set the current value."""


class TimelineKernel(Protocol):
    """``_timeline``: Kafka's timeline collections (caller: ``kraft_storage.timeline``)."""

    LATEST_EPOCH: int
    """Reads at this epoch see the current state (2**63 - 1)."""
    NO_SNAPSHOT_EPOCH: int
    """``latest_epoch`` of a registry without snapshots (-2**63)."""

    @property
    def SnapshotNotFoundError(self) -> type[SnapshotNotFoundError]:
        """No live snapshot at the epoch asked for (both twins raise the leaf's class)."""

    @property
    def SnapshotEpochError(self) -> type[SnapshotEpochError]:
        """A snapshot epoch out of range or older than the newest."""

    @property
    def Snapshot(self) -> type[SnapshotLike]:
        """A snapshot."""

    @property
    def SnapshotRegistry(self) -> type[SnapshotRegistryLike]:
        """The registry."""

    @property
    def TimelineHashMap(self) -> type[TimelineHashMapLike]:
        """The map."""

    @property
    def TimelineHashSet(self) -> type[TimelineHashSetLike]:
        """The set."""

    @property
    def TimelineInteger(self) -> type[TimelineIntegerLike]:
        """The int32."""

    @property
    def TimelineLong(self) -> type[TimelineLongLike]:
        """The int64."""

    @property
    def TimelineObject(self) -> type[TimelineObjectLike]:
        """The object."""

    def put_grouped(self, maps: Any, key_of: Any, topic_of: Any, codes: Any, ints: Any, ones: Any,
                    topic_keys: Any, stale: Any, distinct: Any) -> None:
        """Group entries by (map, topic) and put each group's tuple into its map, one bulk put a
        map (the controller's reverse indexes at a snapshot load; the pure twin is the spec)."""


#: kernel name (``kraft_storage._native.<name>`` / ``kraft_storage._pure.<name>``) -> its contract.
TWINS: dict[str, type] = {
    "_batch": BatchKernel,
    "_crc32c": Crc32cKernel,
    "_fdsync": FdsyncKernel,
    "_frame": FrameKernel,
    "_index": IndexKernel,
    "_logappend": LogAppendKernel,
    "_messages_metadata": MessagesMetadataKernel,
    "_metadata_columns": MetadataColumnsKernel,
    "_timeline": TimelineKernel,
}
