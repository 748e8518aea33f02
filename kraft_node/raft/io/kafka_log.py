"""``KafkaRaftLog``: the core's :class:`~kraft_node.raft.log.RaftLog` over Kafka's on-disk log.

The metadata partition lives in ``<metadata.log.dir>/__cluster_metadata-0``
exactly as Kafka lays it out: segments of v2 record batches
(:class:`kraft_storage.log.KafkaLog`), the ``leader-epoch-checkpoint``, and
snapshots as ``<20-digit end offset>-<10-digit epoch>.checkpoint`` files.

Encoding of a core :class:`Batch` (what Kafka's ``KafkaRaftClient`` writes):

* data batch: one v2 batch, ``baseOffset`` = the batch's first offset,
  ``partitionLeaderEpoch`` = its epoch, one record per core record with a
  null key and the opaque record bytes as the value, no compression;
* a control batch: control bit set, one record whose key is the control key
  (version 0, type 2 = LEADER_CHANGE, 5 = KRAFT_VERSION, 6 = KRAFT_VOTERS) and
  whose value is the ``LeaderChangeMessage`` / ``KRaftVersionRecord`` /
  ``VotersRecord`` body at version 0 (as Kafka writes them).

Snapshots (:class:`KafkaSnapshotControl`): a Kafka snapshot starts with a
control batch holding the ``SnapshotHeaderRecord`` followed, when kraft.version
is 1, by a ``KRaftVersionRecord`` and the ``VotersRecord`` in effect at the
snapshot's end offset (this is what ``kraft-storage format --standalone``
writes into the bootstrap snapshot ``(0, 0)``).  The codec writes snapshots
(``RecordsSnapshotWriter``) and, when the core stores whole bytes, rewrites that
first batch; :meth:`KafkaRaftLog.open_snapshot` reads them back batch by batch
(:class:`KafkaSnapshotReader`: the control state from the first batch only, the data
through ``RecordsSnapshotReader`` over the file's mmap).

Why :class:`RawBatch`: a batch read from disk or from a Fetch response keeps
its exact bytes next to the decoded records, so a follower appends what the
leader sent byte for byte (CRC and timestamps intact) and the leader answers
a Fetch without re-encoding.  A batch the core slices (``Batch(...)`` with
fewer records) loses ``raw`` and is re-encoded.

Durability (the RaftLog contract): appends are buffered by the OS until
:meth:`flush` (``fdatasync``); :meth:`truncate_to`,
:meth:`truncate_fully_and_start_at`, :meth:`create_snapshot` and
:meth:`delete_before` are durable when they return.

Write-behind (``write_behind=True``, the default): a leader append in the log's
current epoch is not written at once.  Its bytes wait in ``_pending`` and every
position (``end_offset``, ``end_offset_for_epoch``, ``last_fetched_epoch``)
already counts them; :meth:`write_pending` writes them (the TCP driver calls it
once a poll's messages are sent; the core's flush policy leaves the job of a poll
that appended held-back batches to the next poll), and so does every method that
needs the file (reads, flushes, truncations, snapshots' log start,
close).  Why: the core answers the followers' parked Fetches from the batches it
keeps in memory, so the ``pwritev`` into the page cache (50 us warm, 200+ us
after an idle gap, session 9's trace) can run after those answers are on the
wire instead of before -- the followers start their write and fsync that much
earlier.  It changes nothing a crash can observe: pending bytes are unflushed
bytes, which the contract already lets a crash lose.  A batch of a new epoch is
written at once (after the pending ones), so the epoch cache never lags: pending
batches always carry the epoch of the log's last batch.

Invariants kept here:

* ``start_offset`` is 0 or the end offset of a retained snapshot (on open,
  the log start is moved up to the latest snapshot if it lags behind, which
  is how the state survives a restart without a log-start checkpoint);
* ``truncate_to(o)`` leaves the end offset exactly at ``o``: Kafka's segment
  truncation drops a straddling batch whole, so its prefix is re-appended.
"""
from __future__ import annotations

import bisect
import os
import struct
import time
import uuid
from typing import Sequence

from kraft_node.raft.messages import (
    Batch,
    Endpoint,
    KRaftVersionControl,
    LeaderChangeMessage,
    OffsetAndEpoch,
    ReplicaKey,
    SnapshotId,
    VoterEntry,
    VotersControl,
)
from kraft_node.raft.voters import VoterSet
from kraft_storage.crc32c import crc32c as _crc32c
from kraft_storage.errors import CorruptRecordError, KraftStorageError
from kraft_storage.log.config import LogConfig
from kraft_storage.log.errors import CorruptCleanLogError
from kraft_storage.log.log import KafkaLog
from kraft_storage.messages.control import (
    ControlRecordType,
    KRaftVersionRecord,
    SnapshotHeaderRecord,
    VotersRecord,
    decode_control_key,
    decode_control_record,
    encode_control_key,
)
from kraft_storage.messages.control import LeaderChangeMessage as WireLeaderChange
from kraft_storage.messages.runtime import METADATA_TOPIC_ID, ZERO_UUID, MessageError, Uuid
from kraft_storage.record import build_batch, build_batches, decode_records, scan_batches
from kraft_storage.record.constants import CONTROL_MASK
from kraft_storage.snapshot import (
    RawSnapshotReader,
    RawSnapshotWriter,
    RecordsSnapshotReader,
    RecordsSnapshotWriter,
    SnapshotError,
    delete_snapshot,
    open_snapshot_dir,
)
from kraft_storage.snapshot import SnapshotId as FileSnapshotId

__all__ = ["KafkaRaftLog", "RawBatch", "FetchedBatches", "encode_batches", "decode_raft_batches",
           "encode_leader_change", "decode_leader_change", "encode_voters", "decode_voters", "encode_kraft_version",
           "decode_kraft_version", "encode_control_value", "KafkaSnapshotControl", "KafkaSnapshotReader",
           "is_records_snapshot"]

#: Upper bound on one read when the core asks for "everything" (listener catch-up):
#: the core delivers what it got and continues at the next poll.
MAX_READ_BYTES = 16 * 1024 * 1024


_RECORDS = Batch.__dict__["records"]  # the slot of Batch.records (a member descriptor)


class _DecodeGroup:
    """Batches that came from one buffer: the first one whose records are needed decodes
    them all with a single ``decode_records`` call (one scan, one columnar decode); the
    others slice the kept values when they are asked.

    No reference cycle: the batches point at their group, the group never at them (it
    keeps their bytes only), so batches nobody decodes (a follower's, mostly) are freed
    by reference counting the moment the core drops them.  With a batch <-> group cycle
    every Fetch answer left garbage for the cycle collector: at 1,000 appends/s each
    follower ran a gen-0 pass ~5 times a second, none since (session 9)."""

    __slots__ = ("buf", "raws", "values", "source")

    def __init__(self, buf, source: str):
        self.buf = buf
        self.raws: list | None = []  # the data batches' bytes, in order (when buf is dropped)
        self.values = None
        self.source = source

    def records(self, first: int, count: int) -> tuple[bytes, ...]:
        """Records ``[first, first + count)`` of the group's data batches, in order."""
        values = self.values
        if values is None:
            buf = self.buf if self.buf is not None else b"".join(self.raws)
            values = self.values = decode_records(buf, verify_crc=False, source=self.source).values()
            self.buf = self.raws = None  # CRCs were checked on arrival
        return tuple(values[first:first + count])


class RawBatch(Batch):
    """A core Batch that carries its exact v2 batch bytes (``raw``), records decoded lazily.

    The leader answers a Fetch with ``raw`` and a follower appends ``raw``, so
    neither needs the records as Python objects; only a listener does.  Record
    count and sizes come from the batch header, so offsets work undecoded.
    Construct with :meth:`make`; it behaves as an ordinary (immutable) Batch.
    """

    __slots__ = ("raw", "_count", "_group", "_first")

    @classmethod
    def make(cls, base_offset: int, epoch: int, count: int, raw: bytes, append_time_ms: int,
             group: _DecodeGroup | None, records=None, is_control: bool = False, control=None,
             first: int = 0) -> "RawBatch":
        """``group``/``first``: undecoded records are ``group.records(first, count)``."""
        b = object.__new__(cls)
        for name, value in (("base_offset", base_offset), ("epoch", epoch), ("is_control", is_control),
                            ("control", control), ("append_time_ms", append_time_ms), ("raw", raw),
                            ("_count", count), ("_group", group if records is None else None),
                            ("_first", first)):
            object.__setattr__(b, name, value)
        _RECORDS.__set__(b, records)
        return b

    @property
    def records(self) -> tuple[bytes, ...]:
        r = _RECORDS.__get__(self)
        if r is None:
            r = self._group.records(self._first, self._count)
            _RECORDS.__set__(self, r)
            object.__setattr__(self, "_group", None)  # the last batch to decode frees the group
        return r

    @property
    def last_offset(self) -> int:
        return self.base_offset + self._count - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + self._count

    @property
    def size_in_bytes(self) -> int:
        return len(self.raw)

    def __reduce__(self):
        return (Batch, (self.base_offset, self.epoch, self.records, self.is_control, self.control,
                        self.append_time_ms))


def _now_ms() -> int:
    return int(time.time() * 1000)


# ------------------------------------------------------------------ control records
def encode_leader_change(msg: LeaderChangeMessage) -> bytes:
    """The LeaderChangeMessage body Kafka writes (schema version 0; voters by id only)."""
    V = WireLeaderChange.Voter
    body = WireLeaderChange(version=msg.version, leader_id=msg.leader_id,
                            voters=[V(voter_id=v) for v in msg.voters],
                            granting_voters=[V(voter_id=v) for v in msg.granting_voters])
    return body.write(0)


def decode_leader_change(value: bytes) -> LeaderChangeMessage:
    body = WireLeaderChange.read(value, 0)
    return LeaderChangeMessage(body.version, body.leader_id, tuple(v.voter_id for v in body.voters),
                               tuple(v.voter_id for v in body.granting_voters))


def _uuid_out(u: uuid.UUID | None):
    return ZERO_UUID if u is None else Uuid(u.bytes)


def _uuid_in(u) -> uuid.UUID | None:
    return None if u is None or u == ZERO_UUID else uuid.UUID(bytes=u.bytes)


def voters_to_record(msg: VotersControl) -> VotersRecord:
    R = VotersRecord
    return R(version=msg.version, voters=[
        R.Voter(voter_id=e.key.id, voter_directory_id=_uuid_out(e.key.directory_id),
                endpoints=[R.Endpoint(name=ep.name, host=ep.host, port=ep.port) for ep in e.endpoints],
                k_raft_version_feature=R.KRaftVersionFeature(min_supported_version=e.min_kraft_version,
                                                             max_supported_version=e.max_kraft_version))
        for e in msg.voters])


def voters_from_record(body: VotersRecord) -> VotersControl:
    out = []
    for v in body.voters:
        f = v.k_raft_version_feature
        out.append(VoterEntry(ReplicaKey(v.voter_id, _uuid_in(v.voter_directory_id)),
                              tuple(Endpoint(ep.name, ep.host, ep.port) for ep in v.endpoints),
                              f.min_supported_version, f.max_supported_version))
    return VotersControl(body.version, tuple(out))


def encode_voters(msg: VotersControl) -> bytes:
    """The VotersRecord body (control type 6, schema version 0) Kafka writes."""
    return voters_to_record(msg).write(0)


def decode_voters(value: bytes) -> VotersControl:
    return voters_from_record(VotersRecord.read(value, 0))


def encode_kraft_version(msg: KRaftVersionControl) -> bytes:
    """The KRaftVersionRecord body (control type 5, schema version 0)."""
    return KRaftVersionRecord(version=msg.version, k_raft_version=msg.kraft_version).write(0)


def decode_kraft_version(value: bytes) -> KRaftVersionControl:
    body = KRaftVersionRecord.read(value, 0)
    return KRaftVersionControl(body.version, body.k_raft_version)


_CONTROL_CODECS = {
    LeaderChangeMessage: (ControlRecordType.LEADER_CHANGE, encode_leader_change),
    VotersControl: (ControlRecordType.KRAFT_VOTERS, encode_voters),
    KRaftVersionControl: (ControlRecordType.KRAFT_VERSION, encode_kraft_version),
}
_CONTROL_DECODERS = {
    ControlRecordType.LEADER_CHANGE: decode_leader_change,
    ControlRecordType.KRAFT_VOTERS: decode_voters,
    ControlRecordType.KRAFT_VERSION: decode_kraft_version,
}
_CONTROL_KEYS = {t: encode_control_key(t) for t, _ in _CONTROL_CODECS.values()}


def encode_control_value(control) -> bytes:
    """Kafka's record value for a core control message (what the core stores as the
    control batch's one record, so the leader's listener sees the same bytes as a follower's)."""
    try:
        _, enc = _CONTROL_CODECS[type(control)]
    except KeyError:
        raise ValueError(f"no Kafka control record for {type(control).__name__}") from None
    return enc(control)


# ------------------------------------------------------------------ snapshot control state
_SNAPSHOT_HEADER_KEY = encode_control_key(ControlRecordType.SNAPSHOT_HEADER)
_BASE_OFFSET = struct.Struct(">q")
_BATCH_LENGTH = struct.Struct(">i")


def _first_batch_size(data) -> int | None:
    """Size of the first v2 batch of ``data`` (None if ``data`` cannot start with one)."""
    if len(data) < 61:  # v2 batch header
        return None
    (length,) = _BATCH_LENGTH.unpack_from(data, 8)
    size = 12 + length
    if length < 49 or size > len(data) or data[16] != 2:
        return None
    return size


def _snapshot_header_batch(data, source: str):
    """``(size, epoch, records)`` of a leading control batch that opens with a SnapshotHeaderRecord,
    records as ``(ControlRecordType, body)``; None when ``data`` does not start with one."""
    size = _first_batch_size(data)
    if size is None:
        return None
    first = bytes(data[:size])
    try:
        h = scan_batches(first, source=source).headers
    except (CorruptRecordError, KraftStorageError):
        return None
    if len(h) != 1 or not int(h["attributes"][0]) & CONTROL_MASK:
        return None
    cols = decode_records(first, verify_crc=False, source=source)
    if len(cols) == 0 or bytes(cols.key(0) or b"") != _SNAPSHOT_HEADER_KEY:
        return None
    out = []
    for i in range(len(cols)):
        try:
            out.append(decode_control_record(cols.key(i), cols.value(i)))
        except MessageError as exc:
            raise CorruptRecordError(f"bad control record {i} in the snapshot header batch: {exc}", 0,
                                     int(h["base_offset"][0]), source) from None
    return size, int(h["partition_leader_epoch"][0]), out


def is_records_snapshot(data) -> bool:
    """Whether ``data`` starts with a Kafka snapshot's header batch (a control batch opening
    with a SnapshotHeaderRecord); only that first batch is read."""
    return _snapshot_header_batch(memoryview(data).cast("B"), "snapshot data") is not None


class KafkaSnapshotControl:
    """The core's :class:`~kraft_node.raft.voters.SnapshotControlCodec` for Kafka snapshots.

    ``read`` (a helper for tests and tools; the core reads the control state through
    :meth:`KafkaRaftLog.open_snapshot`): kraft.version and the voter set from the
    KRaftVersionRecord and VotersRecord after the SnapshotHeaderRecord in the first batch
    (``(0, None)`` for bytes that are not a Kafka records snapshot).
    ``write``: the same snapshot with its first batch rebuilt as
    [SnapshotHeader, KRaftVersion (if > 0), Voters (if known)]; the following
    batches are re-based after it (``baseOffset`` is outside the batch CRC, so
    they keep their bytes otherwise).  Bytes that do not start with a header
    batch get one prepended only when there is control state to carry.
    """

    def __init__(self, source: str = "snapshot"):
        self.source = source

    def read(self, data) -> tuple[int, VoterSet | None]:
        got = _snapshot_header_batch(memoryview(data).cast("B"), self.source)
        if got is None:
            return 0, None
        kv, voters = 0, None
        for ctype, body in got[2][1:]:
            if ctype == ControlRecordType.KRAFT_VERSION:
                kv = body.k_raft_version
            elif ctype == ControlRecordType.KRAFT_VOTERS:
                voters = VoterSet.of(voters_from_record(body).voters)
        return kv, voters

    def writer(self, raw, kraft_version: int, voters: VoterSet | None,
               last_contained_log_time_ms: int) -> RecordsSnapshotWriter:
        """Kafka's RecordsSnapshotWriter: the header batch [SnapshotHeader, KRaftVersion,
        Voters] (voters only with kraft.version >= 1, as Kafka), the appended records in
        batches of up to 8 MiB, the footer on ``freeze()``."""
        rec = voters_to_record(voters.to_control()) if voters is not None and kraft_version > 0 else None
        return RecordsSnapshotWriter(raw, last_contained_log_timestamp=last_contained_log_time_ms,
                                     kraft_version=kraft_version, voters=rec)

    def write(self, data, kraft_version: int, voters: VoterSet | None) -> bytes:
        data = bytes(data)
        got = _snapshot_header_batch(data, self.source)
        if got is None and not kraft_version and voters is None:
            return data
        now = _now_ms()
        if got is not None:
            size, epoch, recs = got
            header = recs[0][1]
            rest = bytearray(data[size:])
            old_count = len(recs)
        else:
            size, epoch, header, rest, old_count = 0, 0, SnapshotHeaderRecord(version=0,
                                                                              last_contained_log_timestamp=now), None, 0
        items = [(ControlRecordType.SNAPSHOT_HEADER, header.write(0))]
        if kraft_version:
            items.append((ControlRecordType.KRAFT_VERSION,
                          encode_kraft_version(KRaftVersionControl(0, kraft_version))))
        if voters is not None:
            items.append((ControlRecordType.KRAFT_VOTERS, encode_voters(voters.to_control())))
        first = build_batch([(encode_control_key(t), v, now) for t, v in items], base_offset=0,
                            partition_leader_epoch=epoch, is_control=True, timestamp=now)
        if rest is None:
            return bytes(first) + data
        shift = len(items) - old_count
        if shift and rest:
            pos = 0
            while pos < len(rest):
                n = _first_batch_size(memoryview(rest)[pos:])
                if n is None:
                    raise CorruptRecordError("snapshot data after the header batch is not v2 batches", size + pos,
                                             -1, self.source)
                (base,) = _BASE_OFFSET.unpack_from(rest, pos)
                _BASE_OFFSET.pack_into(rest, pos, base + shift)
                pos += n
        return bytes(first) + bytes(rest)


class KafkaSnapshotReader:
    """:meth:`KafkaRaftLog.open_snapshot`'s reader (an ``api.SnapshotReader``) over a
    ``.checkpoint`` file's mmap.  :meth:`control_batches` decodes the first batch only (the
    SnapshotHeader with KRaftVersion and Voters after it; the core's read at start and after
    an install).  Iterating opens ``kraft_storage.snapshot.RecordsSnapshotReader`` on the same
    mapping -- every batch CRC-checked and the header/footer layout verified, an error naming
    the file and position otherwise -- and decodes one data batch at a time, its records
    being the values the snapshot writer was given.  Nothing is copied whole into memory."""

    def __init__(self, directory: str, snapshot_id: SnapshotId):
        self.snapshot_id = snapshot_id
        self._raw: RawSnapshotReader | None = RawSnapshotReader.open(
            directory, FileSnapshotId(snapshot_id.offset, snapshot_id.epoch))
        self.name = str(self._raw.path)
        self._records: RecordsSnapshotReader | None = None
        self._head = None

    def _header(self):
        if self._head is None:
            if self._raw is None:
                raise ValueError(f"snapshot reader {self.name} is closed")
            got = _snapshot_header_batch(self._raw.buffer, self.name)
            if got is None:
                raise SnapshotError(f"not a Kafka records snapshot: no SnapshotHeader batch ({self.name}, position 0)")
            self._head = got
        return self._head

    @property
    def last_contained_log_time_ms(self) -> int | None:
        return int(self._header()[2][0][1].last_contained_log_timestamp)

    def control_batches(self):
        _, epoch, recs = self._header()
        for i, (ctype, body) in enumerate(recs):
            if ctype == ControlRecordType.KRAFT_VERSION:
                kv = KRaftVersionControl(0, body.k_raft_version)
                yield Batch(i, epoch, (encode_kraft_version(kv),), True, kv)
            elif ctype == ControlRecordType.KRAFT_VOTERS:
                vc = voters_from_record(body)
                yield Batch(i, epoch, (encode_voters(vc),), True, vc)

    def __iter__(self):
        if self._records is None:
            if self._raw is None:
                raise ValueError(f"snapshot reader {self.name} is closed")
            self._records = RecordsSnapshotReader(self._raw, snapshot_id=self._raw.snapshot_id)
        for row, cols in self._records.iter_batches():
            vals = tuple(b"" if v is None else v for v in cols.values())  # one call per batch
            yield Batch(int(row["base_offset"]), int(row["partition_leader_epoch"]), vals,
                        append_time_ms=int(row["max_timestamp"]))

    def close(self) -> None:
        if self._records is not None:
            self._records.close()
            self._records = None
        if self._raw is not None:
            self._raw.close()
            self._raw = None

    def __enter__(self) -> "KafkaSnapshotReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _ReceivedSnapshot:
    """:meth:`KafkaRaftLog.create_raw_snapshot`'s writer: a ``RawSnapshotWriter`` that
    registers the snapshot with its log when frozen."""

    def __init__(self, log: "KafkaRaftLog", snapshot_id: SnapshotId):
        self._log, self._sid = log, snapshot_id
        self._raw = RawSnapshotWriter.create(log.directory, FileSnapshotId(snapshot_id.offset, snapshot_id.epoch))
        self.snapshot_id = self._raw.snapshot_id  # (end_offset, epoch), as RecordsSnapshotWriter reads it

    @property
    def size_in_bytes(self) -> int:
        return self._raw.size_in_bytes

    @property
    def is_frozen(self) -> bool:
        return self._raw.is_frozen

    def append(self, data) -> int:
        return self._raw.append(data)

    def freeze(self) -> None:
        self._raw.freeze()
        snaps = self._log._snapshots
        if self._sid not in snaps:
            snaps.append(self._sid)
            snaps.sort(key=lambda s: (s.offset, s.epoch))

    def close(self) -> None:
        self._raw.close()


# ------------------------------------------------------------------ batch codec
def encode_batch(b: Batch, timestamp_ms: int | None = None) -> bytes:
    """One core Batch -> one v2 record batch (its ``raw`` bytes when it has them)."""
    if type(b) is RawBatch:
        return b.raw
    ts = _now_ms() if timestamp_ms is None else timestamp_ms
    if b.is_control:
        codec = _CONTROL_CODECS.get(type(b.control))
        if codec is None or len(b.records) != 1:
            raise ValueError(f"control batch at offset {b.base_offset} must hold one LeaderChange, "
                             f"KRaftVersion or Voters record (got {type(b.control).__name__}, "
                             f"{len(b.records)} records)")
        ctype, enc = codec
        return build_batch([(_CONTROL_KEYS[ctype], enc(b.control), ts)], base_offset=b.base_offset,
                           partition_leader_epoch=b.epoch, is_control=True, timestamp=ts)
    if not b.records:
        raise ValueError(f"empty batch at offset {b.base_offset}")
    return build_batches(b.records, records_per_batch=len(b.records), base_offset=b.base_offset,
                         partition_leader_epoch=b.epoch, timestamp=ts)


def encode_batches(batches: Sequence[Batch]) -> bytes:
    """Concatenated v2 batches for ``batches`` (the Fetch ``records`` field)."""
    if len(batches) == 1:
        return encode_batch(batches[0])
    ts = _now_ms()
    return b"".join(encode_batch(b, ts) for b in batches)


_CONTROL_RANK = {ControlRecordType.LEADER_CHANGE: 0, ControlRecordType.KRAFT_VERSION: 1,
                 ControlRecordType.KRAFT_VOTERS: 2}


#: v2 batch header fields the core needs (big-endian): base offset (0), batch length (8),
#: partition leader epoch (12), magic (16), CRC-32C (17) over bytes 21.., attributes (21),
#: last offset delta (23), max timestamp (35), record count (57); the header is 61 bytes.
_V2_HEAD = struct.Struct(">qiibIhi")      # offsets 0..26
_V2_MAX_TS = struct.Struct(">q")          # offset 35
_V2_COUNT = struct.Struct(">i")           # offset 57
_V2_LEN = struct.Struct(">i")             # offset 8
_SMALL_SCAN_MAX_BATCHES = 8


def _small_scan(data: bytes):
    """Header columns of a buffer of at most a few whole, CRC-valid v2 batches, or None.

    Why: a Fetch answer of a lightly loaded quorum holds one or two batches, and the
    numpy scan (array set-up, eight ``tolist``) cost more than the walk itself (~8 us
    of a follower's ~12 us per answer).  Anything unusual -- a short or torn batch, a
    magic other than 2, a bad CRC, more than 8 batches -- returns None so the caller
    takes ``scan_batches``, which names the problem exactly as before."""
    n = len(data)
    # Count first, from the length fields alone: an answer of many batches (a loaded
    # quorum) goes to scan_batches before any CRC is computed here.
    p = k = 0
    while p < n:
        if k == _SMALL_SCAN_MAX_BATCHES or n - p < 61:
            return None
        length = _V2_LEN.unpack_from(data, p + 8)[0]
        if length < 49:
            return None
        p += length + 12
        k += 1
    mv = memoryview(data)
    p = 0
    cols = ([], [], [], [], [], [], [], [])
    counts, bases, lods, epochs, attrs, pos, sizes, max_ts = cols
    while p < n:
        base, length, epoch, magic, crc, attr, lod = _V2_HEAD.unpack_from(data, p)
        size = length + 12
        if magic != 2 or length < 49 or p + size > n or _crc32c(mv[p + 21:p + size]) != crc:
            return None
        counts.append(_V2_COUNT.unpack_from(data, p + 57)[0])
        bases.append(base)
        lods.append(lod)
        epochs.append(epoch)
        attrs.append(attr)
        pos.append(p)
        sizes.append(size)
        max_ts.append(_V2_MAX_TS.unpack_from(data, p + 35)[0])
        p += size
    return cols


def decode_raft_batches(buf, source: str = "records") -> tuple[RawBatch, ...]:
    """v2 batches (one CRC-checking ``scan_batches``) -> the Raft core's batches with their bytes
    (``RawBatch``; not :func:`kraft_storage.record.decode_record_columns`, which decodes records
    into numpy columns).

    Records are decoded lazily, all batches of ``buf`` at once with one
    ``decode_records`` call when a listener first needs them.  A control batch
    is decoded at once: a LeaderChange, KRaftVersionRecord or VotersRecord gives
    ``Batch.control``.  Kafka's leader writes LeaderChange, KRaftVersion and
    Voters in one batch at the start of an epoch of a dynamic quorum; such a
    batch gets the VotersRecord (else the KRaftVersionRecord) as its control,
    since that is the state the core tracks; other types give ``control=None``.
    """
    if type(buf) is bytes:  # (a Fetch answer's records field: no copy)
        data = buf
        if not data:
            return ()
        mv = memoryview(data)
    else:
        mv = memoryview(buf).cast("B")
        if mv.nbytes == 0:
            return ()
        data = bytes(mv)
        mv = memoryview(data)
    cols = _small_scan(data)
    if cols is None:  # many batches, or anything the quick walk does not vouch for
        hdr = scan_batches(mv, source=source).headers
        cols = (hdr["records_count"].tolist(), hdr["base_offset"].tolist(), hdr["last_offset_delta"].tolist(),
                hdr["partition_leader_epoch"].tolist(), hdr["attributes"].tolist(), hdr["position"].tolist(),
                hdr["size"].tolist(), hdr["max_timestamp"].tolist())
    counts, bases, lods, epochs, attrs, pos, sizes, max_ts = cols
    group = _DecodeGroup(data, source)
    raws = group.raws
    out = []
    first = 0  # index of the next data batch's first record among the group's data records
    for k in range(len(counts)):
        n = counts[k]
        if n != lods[k] + 1 or n <= 0:
            raise CorruptRecordError(f"batch at offset {bases[k]} has {n} records but last offset delta "
                                     f"{lods[k]} (compacted or empty batches are not expected in the "
                                     f"metadata log)", pos[k], bases[k], source)
        # (several batches: views into ``data``, which the batches then share, not copies)
        raw = data if len(counts) == 1 else mv[pos[k]:pos[k] + sizes[k]]
        if attrs[k] & CONTROL_MASK:
            cols = decode_records(raw, verify_crc=False, source=source)
            recs = tuple(cols.values())
            control = None
            rank = -1
            for i in range(n):
                _, ctype = decode_control_key(cols.key(i))
                dec = _CONTROL_DECODERS.get(ctype)
                r = _CONTROL_RANK.get(ctype, -1)
                if dec is not None and r > rank:
                    try:
                        control = dec(recs[i])
                    except MessageError as exc:
                        raise CorruptRecordError(f"bad {ctype.name} control record at offset {bases[k] + i}: "
                                                 f"{exc}", pos[k], bases[k], source) from None
                    rank = r
            out.append(RawBatch.make(bases[k], epochs[k], n, raw, max_ts[k], None, recs, True, control))
        else:
            out.append(RawBatch.make(bases[k], epochs[k], n, raw, max_ts[k], group, first=first))
            raws.append(raw)
            first += n
    if len(raws) != len(out):
        group.buf = None  # control batches sit in between: decode from the data batches' own bytes
    else:
        group.raws = None  # (decoded from buf)
    got = FetchedBatches(out)
    got.data = data
    return got


class FetchedBatches(tuple):
    """The batches of one buffer, in order, with the buffer itself (``data``): a follower
    that appends all of them writes ``data`` as received instead of joining the
    batches' bytes again (:meth:`KafkaRaftLog.append_as_follower`).  It is a tuple
    everywhere else."""

    data: bytes


#: Flushed metadata log kept in the OS page cache: the newest 32 MiB (LogConfig.
#: page_cache_retain_bytes).  Reads of this log are rare: the leader answers Fetches from
#: the batches it holds in memory and listeners get records handed over; what reads it
#: is a follower or observer catching up from behind, which the retained tail still
#: serves from memory for the last 32 MiB.  Why drop the rest: on VMs that give freed
#: guest memory back to the host (the machines here), each fresh page-cache page costs a
#: host page fault, and at saturation the voters spent ~25-30% of their time in write()
#: (BENCHMARKS.md, session 7).
PAGE_CACHE_RETAIN_BYTES = 32 << 20


# ------------------------------------------------------------------ the log
class KafkaRaftLog:
    """RaftLog over a ``__cluster_metadata-0`` directory (see the module doc)."""

    def __init__(self, directory: str, config: LogConfig | None = None, write_behind: bool = True):
        """``config`` defaults to ``LogConfig(verify_crc=False, page_cache_retain_bytes=
        PAGE_CACHE_RETAIN_BYTES)``: every batch this log is given was either built here
        (leader) or CRC-checked when its Fetch response was decoded (follower), so the
        append does not check it a second time (an unclean open still validates every
        batch after the recovery point); and flushed data older than the last
        ``PAGE_CACHE_RETAIN_BYTES`` leaves the page cache (see the constant).
        ``write_behind``: see the module doc."""
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self._log = KafkaLog.open(self.directory, config or LogConfig(
            verify_crc=False, page_cache_retain_bytes=PAGE_CACHE_RETAIN_BYTES),
                                  topic_id=METADATA_TOPIC_ID.bytes)
        try:
            self._snapshots: list[SnapshotId] = sorted(
                (OffsetAndEpoch(s.end_offset, s.epoch) for s in open_snapshot_dir(self.directory)),
                key=lambda s: (s.offset, s.epoch))
            self.high_watermark = 0
            self.flush_count = 0
            latest = self.latest_snapshot_id()
            if latest is not None and latest.offset > self._log.log_start_offset:
                if latest.offset > self._log.log_end_offset:
                    self._log.truncate_fully_and_start_at(latest.offset)
                else:
                    self._log.advance_log_start_offset(latest.offset)
        except BaseException:
            # (a bad snapshot file...): the segments were opened, so close them cleanly --
            # a failed open must leave the directory as it found it (issue 19)
            self._log.close()
            raise
        self._flushed = self._log.log_end_offset
        self.write_behind = write_behind
        #: leader batches appended but not yet written, in offset order: (raw bytes, epoch);
        #: their epoch is always the epoch of the last batch in the file
        self._pending: list[tuple[bytes, int]] = []
        self._pending_end = 0  # end offset counting _pending (meaningful while it is non-empty)

    @property
    def load_report(self):
        """What opening the segments found and did (``kraft_storage.log.log.LoadReport``):
        the node logs it at start."""
        return self._log.load_report

    # ---- write-behind
    @property
    def pending_writes(self) -> int:
        """Leader batches appended but not yet written to the file (see the module doc)."""
        return len(self._pending)

    def write_pending(self) -> None:
        """Write the batches held back by write-behind (a no-op when there are none)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        append = self._log.append_as_leader
        for i, (raw, epoch) in enumerate(pending):
            try:
                append(raw, epoch)
            except BaseException:
                self._pending = pending[i:]  # the failed one and those after it stay pending
                raise

    # ---- positions
    @property
    def kafka_log(self) -> KafkaLog:
        self.write_pending()
        return self._log

    @property
    def start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def end_offset(self) -> int:
        return self._pending_end if self._pending else self._log.log_end_offset

    @property
    def flushed_end_offset(self) -> int:
        return max(min(self._flushed, self.end_offset), self.start_offset)

    def _start_epoch(self) -> int:
        start = self.start_offset
        for sid in self._snapshots:
            if sid.offset == start:
                return sid.epoch
        return 0

    @property
    def last_fetched_epoch(self) -> int:
        if self.end_offset > self.start_offset:
            return self._log.last_fetched_epoch
        return self._start_epoch()

    # ---- writes
    def append_as_leader(self, batch: Batch) -> RawBatch:
        """Append; returns the batch as written (a RawBatch with its bytes and records), which
        the core keeps to answer Fetches and feed listeners without reading the log back.
        With write-behind the bytes are written by :meth:`write_pending` (or any method
        that needs the file) when the batch is in the epoch of the log's last batch."""
        if batch.base_offset != self.end_offset:
            raise ValueError(f"append at offset {batch.base_offset} but log end offset is {self.end_offset}")
        out = batch if type(batch) is RawBatch else None
        raw = batch.raw if out is not None else encode_batch(batch)
        if self.write_behind and (self._pending or (self._log.log_end_offset > self._log.log_start_offset
                                                    and self._log.epoch_cache.latest_epoch == batch.epoch)):
            if self._pending and self._pending[-1][1] != batch.epoch:
                self.write_pending()  # a new epoch: what is pending first, then this one at once
                self._log.append_as_leader(raw, batch.epoch)
            else:
                self._pending.append((raw, batch.epoch))
                self._pending_end = batch.next_offset  # (a RawBatch's from its header: no decode)
        else:
            self.write_pending()  # (only if write_behind was switched off meanwhile)
            self._log.append_as_leader(raw, batch.epoch)
        if out is not None:
            return out
        return RawBatch.make(batch.base_offset, batch.epoch, len(batch.records), raw, batch.append_time_ms, None,
                             batch.records, batch.is_control, batch.control)

    def append_as_follower(self, batches: Sequence[Batch]) -> None:
        if not batches:
            return
        self.write_pending()
        if batches[0].base_offset != self.end_offset:
            raise ValueError(f"append at offset {batches[0].base_offset} but log end offset is "
                             f"{self.end_offset}")
        data = getattr(batches, "data", None)  # FetchedBatches: the bytes as fetched
        self._log.append_as_follower(data if data is not None else encode_batches(batches))

    def flush(self) -> None:
        self.write_pending()
        if self._flushed < self.end_offset:
            self._log.flush()
            self.flush_count += 1
        self._flushed = self.end_offset

    def begin_flush(self):
        """The fsync half of :meth:`flush` as a job for another thread, or None when
        everything is flushed (see ``KafkaLog.begin_flush``).  Writes what is pending first."""
        self.write_pending()
        if self._flushed >= self.end_offset:
            return None
        return self._log.begin_flush()

    def complete_flush(self, job) -> bool:
        """After ``job.run()``: the job's end offset counts as flushed unless the log was
        truncated meanwhile (then the next flush covers it).  Raises the fsync's error."""
        if not self._log.complete_flush(job):
            return False
        self._flushed = max(self._flushed, job.end_offset)
        self.flush_count += 1
        return True

    def truncate_to(self, offset: int) -> None:
        if offset < self.start_offset:
            raise ValueError(f"cannot truncate to {offset}, below log start offset {self.start_offset}")
        if offset >= self.end_offset:
            return
        self.write_pending()
        keep: tuple[Batch, ...] = ()
        straddling = self._read_whole(offset, 1) if offset > self.start_offset else ()
        if straddling and straddling[0].base_offset < offset:
            # Kafka's segment truncation drops this batch whole: re-append its prefix
            # (from the log start if the batch also straddles the log start).
            b = straddling[0]
            base = max(b.base_offset, self.start_offset)
            keep = (Batch(base, b.epoch, b.records[base - b.base_offset:offset - b.base_offset], b.is_control,
                          b.control, b.append_time_ms),)
        self._log.truncate_to(offset)
        if keep and self.end_offset == keep[0].base_offset:
            self._log.append_as_follower(encode_batches(keep))
        if self.end_offset != offset:
            raise RuntimeError(f"{self.directory}: truncation to {offset} left the log end at {self.end_offset}")
        self._log.flush()  # the new size (and any re-appended prefix) is durable before we return
        self._flushed = offset

    def truncate_fully_and_start_at(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._snapshots:
            raise ValueError(f"no stored snapshot {snapshot_id} to restart the log at")
        self._pending = []  # (the whole log goes: nothing pending is kept)
        self._log.truncate_fully_and_start_at(snapshot_id.offset)
        self._flushed = snapshot_id.offset

    # ---- reads
    def read(self, start_offset: int, max_bytes: int) -> tuple[Batch, ...]:
        out = self._read_whole(start_offset, max_bytes)
        if out and out[0].base_offset < start_offset:
            first = out[0]
            k = start_offset - first.base_offset
            out = (Batch(start_offset, first.epoch, first.records[k:], first.is_control, first.control,
                         first.append_time_ms),) + out[1:]
        return out

    def _read_whole(self, start_offset: int, max_bytes: int) -> tuple[RawBatch, ...]:
        """Whole batches from the one holding ``start_offset`` (one decode for the lot)."""
        self.write_pending()
        start, end = self.start_offset, self.end_offset
        if start_offset < start or start_offset > end:
            raise ValueError(f"read at {start_offset} outside log [{start}, {end})")
        if start_offset == end:
            return ()
        budget = max(1, min(max_bytes, MAX_READ_BYTES))
        parts = []
        where = []  # (segment file, file position) of each part
        pos = start_offset
        got = 0
        while pos < end and got < budget:
            data = self._log.read(pos, budget - got, min_one_batch=not parts)
            n = len(data)
            if n == 0:
                break
            buf = data.tobytes()
            parts.append(buf)
            where.append((data.path, data.position))
            got += n
            if got >= budget:
                break
            batches_end = _next_offset_of(buf)
            if batches_end <= pos:
                break
            pos = batches_end
        if not parts:
            return ()
        try:
            return decode_raft_batches(parts[0] if len(parts) == 1 else b"".join(parts), source=self.directory)
        except CorruptRecordError as exc:
            raise self._damage(exc, parts, where) from None

    def _damage(self, exc: CorruptRecordError, parts, where) -> KraftStorageError:
        """A batch read back from the segments is corrupt (a CRC mismatch...): name the segment
        file and the byte position *in that file* (the decoder only knows the position in
        what was read), and say how to proceed.  In a log that was shut down cleanly this is
        damage, not a torn write (``CorruptCleanLogError``): a node refuses to start on it,
        again at every start, until ``kraft-storage recover`` truncates it explicitly."""
        file, file_pos = self.directory, exc.position
        if exc.position >= 0:
            start = 0
            for buf, (path, position) in zip(parts, where):
                if start <= exc.position < start + len(buf):
                    file, file_pos = path or self.directory, position + exc.position - start
                    break
                start += len(buf)
        reason = exc.reason
        if self._log.load_report.clean_shutdown:
            return CorruptCleanLogError(self.directory, file, file_pos, exc.base_offset, reason)
        return CorruptRecordError(f"{reason}; the log is damaged: inspect it with `kraft-storage verify` and, to "
                                  f"truncate at the corruption, run `kraft-storage recover`", file_pos,
                                  exc.base_offset, file)

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        entries = [(e, s) for e, s in self._log.epoch_cache.entries() if s < self.end_offset]
        epochs = [e for e, _ in entries]
        i = bisect.bisect_right(epochs, epoch) - 1
        if i < 0:
            return OffsetAndEpoch(self.start_offset, self._start_epoch())
        end = entries[i + 1][1] if i + 1 < len(entries) else self.end_offset
        return OffsetAndEpoch(end, entries[i][0])

    def update_high_watermark(self, offset: int) -> None:
        self.high_watermark = offset

    # ---- snapshots
    def latest_snapshot_id(self) -> SnapshotId | None:
        return self._snapshots[-1] if self._snapshots else None

    def earliest_snapshot_id(self) -> SnapshotId | None:
        return self._snapshots[0] if self._snapshots else None

    def read_snapshot(self, snapshot_id: SnapshotId) -> bytes | None:
        """A stored snapshot's bytes whole (tests and tools; not in the ``RaftLog`` contract:
        the core and listeners stream it through :meth:`open_snapshot`)."""
        if snapshot_id not in self._snapshots:
            return None
        with RawSnapshotReader.open(self.directory, FileSnapshotId(snapshot_id.offset, snapshot_id.epoch)) as r:
            return bytes(r.buffer)

    def open_snapshot(self, snapshot_id: SnapshotId) -> KafkaSnapshotReader | None:
        if snapshot_id not in self._snapshots:
            return None
        return KafkaSnapshotReader(self.directory, snapshot_id)

    def read_snapshot_range(self, snapshot_id: SnapshotId, position: int,
                            max_bytes: int) -> tuple[int, bytes] | None:
        """``(size, chunk)``: the snapshot's size and up to ``max_bytes`` from ``position``
        (empty outside it), through the mmap: a FetchSnapshot answer reads its range only."""
        if snapshot_id not in self._snapshots:
            return None
        with RawSnapshotReader.open(self.directory, FileSnapshotId(snapshot_id.offset, snapshot_id.epoch)) as r:
            size = r.size_in_bytes
            return size, (r.read(position, max_bytes) if 0 <= position < size else b"")

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Write ``data`` (a whole snapshot, normally Kafka records format) as a frozen
        ``.checkpoint``: ``.part`` file, fsync, atomic rename, directory fsync."""
        if snapshot_id in self._snapshots:
            return
        with RawSnapshotWriter.create(self.directory, FileSnapshotId(snapshot_id.offset, snapshot_id.epoch)) as w:
            w.append(data)
            w.freeze()
        self._snapshots.append(snapshot_id)
        self._snapshots.sort(key=lambda s: (s.offset, s.epoch))

    def create_raw_snapshot(self, snapshot_id: SnapshotId) -> "_ReceivedSnapshot":
        """A snapshot received in slices (a follower's FetchSnapshot): a ``.part`` file the
        slices are appended to as they come; ``freeze()`` fsyncs, renames and registers it,
        ``close()`` before that removes the ``.part`` (a crash leaves it to the next open)."""
        return _ReceivedSnapshot(self, snapshot_id)

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._snapshots:
            raise ValueError(f"no stored snapshot {snapshot_id}")
        off = snapshot_id.offset
        if off > self.end_offset:
            raise ValueError(f"snapshot {snapshot_id} is beyond the log end offset {self.end_offset}")
        self.write_pending()
        if off > self.start_offset:
            self._log.advance_log_start_offset(off)
        self._flushed = max(self._flushed, off)
        for sid in [s for s in self._snapshots if s.offset < off]:
            delete_snapshot(self.directory, FileSnapshotId(sid.offset, sid.epoch))
            self._snapshots.remove(sid)

    # ---- lifecycle
    def close(self) -> None:
        """Flush and close cleanly (leaves Kafka's clean-shutdown marker)."""
        self.write_pending()
        self._log.close()

    def close_uncleanly(self) -> None:
        """Close as a crash would (tests): what write-behind still held is lost, as
        unflushed data may be."""
        self._pending = []
        self._log.close_uncleanly()

    def __repr__(self) -> str:
        return (f"KafkaRaftLog({self.directory!r}, start={self.start_offset}, end={self.end_offset}, "
                f"flushed={self.flushed_end_offset})")


def _next_offset_of(buf: bytes) -> int:
    """Offset after the last whole batch in ``buf`` (header fields only)."""
    from kraft_storage.record import scan_batches
    h = scan_batches(buf, verify_crc=False, allow_partial_tail=True).headers
    if not len(h):
        return -1
    return int(h["base_offset"][-1]) + int(h["last_offset_delta"][-1]) + 1
