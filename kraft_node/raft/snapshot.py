"""The core's own snapshot format: batches in length-prefixed frames, read one at a time.

Why: a snapshot is handed to the state machine as a :class:`~kraft_node.raft.api.SnapshotReader`
that yields batches, and the core reads a snapshot's control state (kraft.version, voters)
from its leading control batches -- neither may need the whole snapshot in memory (about
100 MB at a million partitions).  A Kafka log stores Kafka's format
(``kraft_storage.snapshot``: v2 record batches, read by ``RecordsSnapshotReader``); a
:class:`~kraft_node.raft.log.MemoryRaftLog` (the simulator, tests) stores this one, which has
the same shape -- optional header, control batches first, then the state machine's batches --
without Kafka's record encoding.  Every snapshot a core handles is thus framed in batches, so
one reader contract serves both (the alternative, a streaming parse per ad-hoc codec, would
have left the state machine to frame its own records in every format).

A frame is ``length:u32 kind:u8 body`` (big-endian; ``length`` counts ``kind`` and ``body``):

* ``HEADER``: ``last_contained_log_time_ms:i64`` (only as the first frame);
* ``KRAFT_VERSION``: ``kraft_version:i16``;
* ``VOTERS``: the voter set as JSON (id, directory id, endpoints, kraft.version range);
* ``DATA``: ``count:u32`` then ``count`` records, each ``length:u32 bytes``.

Data batches get consecutive offsets from 0 and the snapshot's epoch, as Kafka's
snapshot batches do.  A frame that is cut short or malformed raises
:class:`~kraft_node.raft.errors.RaftError` naming the snapshot and the frame's position.
"""
from __future__ import annotations

import json
import struct
import uuid
from typing import Any, Iterator, Sequence

from kraft_node.raft.errors import RaftError
from kraft_node.raft.messages import (
    Batch,
    Endpoint,
    KRaftVersionControl,
    ReplicaKey,
    SnapshotId,
    VoterEntry,
    VotersControl,
)

HEADER, KRAFT_VERSION, VOTERS, DATA = 0, 1, 2, 3

_FRAME = struct.Struct(">IB")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")


def _frame(kind: int, body: bytes) -> bytes:
    return _FRAME.pack(len(body) + 1, kind) + body


def header_frame(last_contained_log_time_ms: int) -> bytes:
    return _frame(HEADER, _I64.pack(last_contained_log_time_ms))


def control_frames(kraft_version: int, voters: VotersControl | None) -> bytes:
    """The control batches of a snapshot: kraft.version (if > 0), then the voter set (if known)."""
    out = b""
    if kraft_version:
        out += _frame(KRAFT_VERSION, _I16.pack(kraft_version))
    if voters is not None:
        doc = [[e.key.id, str(e.key.directory_id) if e.key.directory_id else None,
                [[p.name, p.host, p.port] for p in e.endpoints], e.min_kraft_version, e.max_kraft_version]
               for e in voters.voters]
        out += _frame(VOTERS, json.dumps(doc).encode())
    return out


def data_frame(records: Sequence[bytes]) -> bytes:
    """One data batch: ``records`` in order."""
    parts = [_U32.pack(len(records))]
    for r in records:
        parts.append(_U32.pack(len(r)))
        parts.append(bytes(r))
    return _frame(DATA, b"".join(parts))


def _voters(doc: Any) -> VotersControl:
    return VotersControl(0, tuple(
        VoterEntry(ReplicaKey(int(i), uuid.UUID(d) if d else None),
                   tuple(Endpoint(str(n), str(h), int(p)) for n, h, p in eps), int(lo), int(hi))
        for i, d, eps, lo, hi in doc))


class FramedSnapshotReader:
    """A :class:`~kraft_node.raft.api.SnapshotReader` over a snapshot in this format held in
    memory (a :class:`~kraft_node.raft.log.MemoryRaftLog`'s).  Iterating yields the data
    batches in order, decoded one frame at a time; :meth:`control_batches` reads only the
    leading control frames.  ``name`` goes in every error."""

    def __init__(self, snapshot_id: SnapshotId, data: bytes, name: str):
        self.snapshot_id = snapshot_id
        self.name = name
        self._buf: memoryview | None = memoryview(data)
        self.last_contained_log_time_ms: int | None = None
        self.data_position = 0
        self._controls: list[Batch] = []
        self._read_head()

    def _fail(self, what: str, position: int) -> RaftError:
        return RaftError(f"corrupt snapshot {self.name}: {what} at position {position}")

    def _frames(self, pos: int) -> Iterator[tuple[int, int, memoryview]]:
        """``(position, kind, body)`` of each frame from ``pos``."""
        buf = self._buf
        if buf is None:
            raise ValueError(f"snapshot reader {self.name} is closed")
        end = len(buf)
        while pos < end:
            if pos + _FRAME.size > end:
                raise self._fail("truncated frame header", pos)
            length, kind = _FRAME.unpack_from(buf, pos)
            if length < 1 or pos + 4 + length > end:
                raise self._fail(f"frame of {length} bytes past the end ({end})", pos)
            yield pos, kind, buf[pos + _FRAME.size:pos + 4 + length]
            pos += 4 + length

    def _read_head(self) -> None:
        """The header and control frames (a snapshot's head); stops at the first data frame."""
        offset = 0
        for pos, kind, body in self._frames(0):
            try:
                if kind == HEADER and pos == 0:
                    (self.last_contained_log_time_ms,) = _I64.unpack(body)
                    self.data_position = pos + _FRAME.size + len(body)
                    continue
                if kind == KRAFT_VERSION:
                    (kv,) = _I16.unpack(body)
                    control: KRaftVersionControl | VotersControl = KRaftVersionControl(0, kv)
                elif kind == VOTERS:
                    control = _voters(json.loads(bytes(body)))
                else:
                    break
            except (struct.error, ValueError, TypeError) as exc:
                raise self._fail(f"bad control frame ({exc})", pos) from None
            self._controls.append(Batch(offset, self.snapshot_id.epoch, (bytes(body),), True, control))
            offset += 1
            self.data_position = pos + _FRAME.size + len(body)

    def control_batches(self) -> Iterator[Batch]:
        """The snapshot's control batches (KRaftVersion, then Voters), at offsets from 0."""
        return iter(self._controls)

    def __iter__(self) -> Iterator[Batch]:
        offset = len(self._controls)
        epoch = self.snapshot_id.epoch
        for pos, kind, body in self._frames(self.data_position):
            if kind != DATA:
                raise self._fail(f"frame kind {kind} in the data section", pos)
            try:
                (count,) = _U32.unpack_from(body, 0)
                at = 4
                records = []
                for _ in range(count):
                    (n,) = _U32.unpack_from(body, at)
                    if at + 4 + n > len(body):
                        raise ValueError(f"record of {n} bytes past the frame's end")
                    records.append(bytes(body[at + 4:at + 4 + n]))
                    at += 4 + n
                if at != len(body):
                    raise ValueError(f"{len(body) - at} bytes after the frame's records")
            except (struct.error, ValueError) as exc:
                raise self._fail(f"bad data frame ({exc})", pos) from None
            yield Batch(offset, epoch, tuple(records))
            offset += count

    def close(self) -> None:
        self._buf = None

    def __enter__(self) -> FramedSnapshotReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
