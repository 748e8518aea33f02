"""Pure-Python twin of the log-append kernel (``kraft_storage._native._logappend``).

Why a kernel: appending a small batch (a few KiB) to a :class:`KafkaLog`
used to cost ~75 us, almost all of it small numpy operations (a header
array per call, copies, field reads, index planning).  The kernel does the
whole per-append job in two calls with no per-batch Python work:

``Appender.scan(buf, mode, next_offset, leader_epoch, latest_epoch, crc_mode)``
    validates every batch of ``buf`` (sizes, magic, CRC-32C when asked), then

    * leader (``MODE_LEADER``): assigns offsets from ``next_offset``
      (batch i gets the base offset after batch i-1's last offset) and
      stamps ``leader_epoch``;
    * follower (``MODE_FOLLOWER``): checks that the first batch starts at
      ``next_offset`` and each batch right after the previous one, and that
      epochs never go below the running maximum (which starts at
      ``latest_epoch``; -1 when the log has none) -- OutOfOrderAppend
      otherwise.

    A negative ``lastOffsetDelta`` is rejected as corrupt (it would make
    offsets go backwards).  Afterwards the read-only attributes describe the
    append: ``batches``, ``nbytes``, ``records``, ``first_offset``,
    ``last_offset``, ``max_timestamp`` (max over the batches),
    ``first_max_timestamp`` (first batch's, for segment rolling) and
    ``epochs``: the ``(epoch, start_offset)`` pairs the leader-epoch cache
    must learn, in order (usually empty).  The caller decides whether to
    roll the segment between the two calls.

``Appender.write(fd, start, segment_base, interval, bytes_since, max_ts,
offset_of_max_ts, offset_index_buf, offset_n, offset_max, time_index_buf,
time_n, time_max)``
    plans the index entries by Kafka 4's per-batch rule (see
    :mod:`kraft_storage._pure._index`), refuses with ValueError -- before
    writing anything -- when an index lacks room (``*_max`` entries, and the
    buffer's size) or a relative offset/position leaves int32, writes the
    batches at file position ``start`` (leader: each batch's 16-byte prefix
    baseOffset/batchLength/partitionLeaderEpoch is rewritten on the way out
    with ``pwritev``; none of those bytes is under the CRC, and the caller's
    buffer is never modified), cuts the file back to ``start`` and raises
    OSError if the write fails, and only then writes the index entries into
    the index buffers (mmaps) at slots ``offset_n``/``time_n``.  The caller
    publishes the new counts, so a reader never sees an entry whose bytes
    are not written.  Returns ``(offset_n, time_n, bytes_since, max_ts,
    offset_of_max_ts)`` after the append.

``Appender.release()`` drops the reference to the scanned buffer (always
call it, also when the append is abandoned between the two calls).

One writer per Appender (the log's writer thread); the object keeps scratch
space between calls.
"""
from __future__ import annotations

import os
import struct

import numpy as np

from kraft_storage._common import BATCH_DTYPE
from kraft_storage.accel import load
from kraft_storage.errors import CorruptRecordError, OutOfOrderAppend

#: The batch scanner (the chosen ``_batch`` twin; the same one ``record.batch.scan_batches`` calls).
_batch = load("_batch")

MODE_LEADER = 0
MODE_FOLLOWER = 1
_I32_MAX = 0x7FFFFFFF
_HDR16 = struct.Struct(">qii")
_OFF = struct.Struct(">ii")
_TIME = struct.Struct(">qi")
_BE64 = struct.Struct(">q")
_IOV_MAX = 1024
SOURCE = "appended records"


def _scan_all(mv, crc_mode: int) -> np.ndarray:
    """The headers (BATCH_DTYPE) of every batch of ``mv``; CorruptRecordError naming
    ``SOURCE`` when one is torn or corrupt (``record.batch.scan_batches(mv, crc_mode=...,
    source=SOURCE).headers``, without the import of the layer above)."""
    end = mv.nbytes
    cap = min(max(end // 61 + 1, 1), 4096)
    chunks = []
    pos = 0
    while True:
        out = np.empty(cap, dtype=BATCH_DTYPE)
        status, n, pos, msg, epos, ebo = _batch.scan(mv, pos, end, crc_mode, 0, out)
        chunks.append(out[:n])
        if status != _batch.CAPACITY:
            break
        cap = min(cap * 2, 1 << 20)
    if status in (_batch.TRUNCATED, _batch.CORRUPT):
        raise CorruptRecordError(msg, epos, None if ebo == _batch.NO_OFFSET else ebo, SOURCE)
    return chunks[0].copy() if len(chunks) == 1 else np.concatenate(chunks)


def _write_all(fd: int, buffers: list, start: int) -> None:
    """pwritev every buffer at ``start``, finishing short writes."""
    pos = start
    for i in range(0, len(buffers), _IOV_MAX):
        chunk = buffers[i:i + _IOV_MAX]
        want = sum(len(b) for b in chunk)
        w = os.pwritev(fd, chunk, pos)
        if w != want:  # short write (e.g. a full disk): finish byte-wise
            rest = b"".join(bytes(b) for b in chunk)[w:]
            while rest:
                k = os.pwrite(fd, rest, pos + w)
                if k <= 0:
                    raise OSError("write returned 0")
                w += k
                rest = rest[k:]
        pos += want


class Appender:
    """See the module doc."""

    def __init__(self):
        self._mv = None
        self._h = None
        self.mode = MODE_LEADER
        self.leader_epoch = -1
        self.batches = self.nbytes = self.records = 0
        self.first_offset = self.last_offset = -1
        self.max_timestamp = self.first_max_timestamp = -1
        self.epochs = ()

    def release(self) -> None:
        self._h = None
        if self._mv is not None:
            self._mv.release()
            self._mv = None

    def scan(self, buf, mode: int, next_offset: int, leader_epoch: int, latest_epoch: int,
             crc_mode: int) -> None:
        self.release()
        if mode not in (MODE_LEADER, MODE_FOLLOWER):
            raise ValueError(f"unknown append mode {mode}")
        mv = memoryview(buf).cast("B")
        if mv.nbytes == 0:
            raise ValueError("nothing to append: the buffer is empty")
        h = _scan_all(mv, crc_mode)
        base = [int(x) for x in h["base_offset"]]
        lod = [int(x) for x in h["last_offset_delta"]]
        pos = [int(x) for x in h["position"]]
        for i, d in enumerate(lod):
            if d < 0:
                raise CorruptRecordError(f"negative last offset delta {d}", pos[i], base[i], SOURCE)
        floor = latest_epoch
        epochs = []
        if mode == MODE_LEADER:
            b = next_offset
            for i in range(len(h)):
                base[i] = b
                b += lod[i] + 1
            h["base_offset"] = base
            h["partition_leader_epoch"] = leader_epoch
            if leader_epoch > floor:
                epochs.append((leader_epoch, next_offset))
        else:
            expected = next_offset
            for i in range(len(h)):
                if base[i] != expected:
                    raise OutOfOrderAppend(expected, base[i], pos[i])
                expected = base[i] + lod[i] + 1
            for i, ep in enumerate(int(x) for x in h["partition_leader_epoch"]):
                if ep < floor:
                    raise OutOfOrderAppend(base[i], base[i], pos[i],
                                           reason=f"the batch at offset {base[i]} has leader epoch {ep}, "
                                                  f"older than epoch {floor} already in the log")
                if ep > floor:
                    if ep >= 0:
                        epochs.append((ep, base[i]))
                    floor = ep
        self._mv, self._h = mv, h
        self.mode, self.leader_epoch = mode, leader_epoch
        self.batches = len(h)
        self.nbytes = mv.nbytes
        self.records = int(h["records_count"].sum())
        self.first_offset = base[0]
        self.last_offset = base[-1] + lod[-1]
        self.max_timestamp = int(h["max_timestamp"].max())
        self.first_max_timestamp = int(h["max_timestamp"][0])
        self.epochs = tuple(epochs)

    def write(self, fd: int, start: int, segment_base: int, interval: int, bytes_since: int,
              max_ts: int, offset_of_max_ts: int, offset_buf, offset_n: int, offset_max: int,
              time_buf, time_n: int, time_max: int):
        h, mv = self._h, self._mv
        if h is None:
            raise RuntimeError("write() needs a successful scan() first")
        omv = memoryview(offset_buf).cast("B") if offset_buf is not None else memoryview(b"")
        tmv = memoryview(time_buf).cast("B") if time_buf is not None else memoryview(b"")
        if time_n > tmv.nbytes // 12 or offset_n > omv.nbytes // 8 or time_n < 0 or offset_n < 0:
            raise ValueError("index entry counts exceed the index buffers")
        last_time_ts = _BE64.unpack_from(tmv, (time_n - 1) * 12)[0] if time_n else -1
        # plan (Kafka 4's LogSegment.append rule, batch by batch)
        oe, te = [], []
        for i in range(len(h)):
            last = int(h["base_offset"][i]) + int(h["last_offset_delta"][i])
            mts = int(h["max_timestamp"][i])
            if mts > max_ts:
                max_ts, offset_of_max_ts = mts, last
            if bytes_since > interval:
                oe.append((last - segment_base, start + int(h["position"][i])))
                if max_ts > last_time_ts:
                    te.append((max_ts, offset_of_max_ts - segment_base))
                    last_time_ts = max_ts
                bytes_since = 0
            bytes_since += int(h["size"][i])
        if oe and offset_n + len(oe) > min(offset_max, omv.nbytes // 8):
            raise ValueError(f"offset index is full ({offset_n} entries, {len(oe)} more needed)")
        if te and time_n + len(te) > min(time_max, tmv.nbytes // 12):
            raise ValueError(f"time index is full ({time_n} entries, {len(te)} more needed)")
        for rel, p in oe:
            if not (0 <= rel <= _I32_MAX and 0 <= p <= _I32_MAX):
                raise ValueError(f"index entry ({rel}, {p}) does not fit in int32")
        for _ts, rel in te:
            if not 0 <= rel <= _I32_MAX:
                raise ValueError(f"time index offset {rel} does not fit in int32")
        # write the batches
        if self.mode == MODE_LEADER:
            buffers = []
            for i in range(len(h)):
                p, s = int(h["position"][i]), int(h["size"][i])
                buffers.append(_HDR16.pack(int(h["base_offset"][i]), s - 12, self.leader_epoch))
                buffers.append(mv[p + 16:p + s])
        else:
            buffers = [mv]
        try:
            _write_all(fd, buffers, start)
        except BaseException:
            os.ftruncate(fd, start)
            raise
        # then the index entries (the caller publishes the counts)
        for k, (rel, p) in enumerate(oe):
            _OFF.pack_into(omv, (offset_n + k) * 8, rel, p)
        for k, (ts, rel) in enumerate(te):
            _TIME.pack_into(tmv, (time_n + k) * 12, ts, rel)
        return offset_n + len(oe), time_n + len(te), bytes_since, max_ts, offset_of_max_ts
