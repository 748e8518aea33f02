"""Pure-Python twin of the record-batch kernels (``kraft_storage._native._batch``).

It is the executable specification of ``csrc/recordbatch.c``: the same
functions, the same arguments, the same results and the same error messages,
written as plainly as possible.  Tests run both and compare them; a process
started with ``KRAFT_NO_EXTENSIONS=1`` uses this one.

Layouts are documented in ``csrc/recordbatch.h``.  Kernel return convention
(shared with the native module): status codes ``OK``, ``TRUNCATED``,
``CORRUPT``, ``CAPACITY``; errors come back as ``(status, message, position,
base_offset)`` so the facade raises one well-formed ``CorruptRecordError``.
"""
from __future__ import annotations

import struct

import numpy as np

from kraft_storage._common import zigzag_varint
from kraft_storage.crc32c import crc32c

OK, TRUNCATED, CORRUPT, CAPACITY = 0, 1, 2, 3
CRC_SKIP, CRC_VERIFY, CRC_REPORT = 0, 1, 2
LOG_OVERHEAD = 12
HEADER_SIZE = 61
MIN_RECORD_SIZE = 7
INT32_MAX = 2**31 - 1
NO_OFFSET = -(2**63)  # "base offset unknown" in errors (INT64_MIN in C)

_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte v2 header
_I64 = 2**64


def _wrap64(v: int) -> int:
    """Two's-complement wrap, as the C kernel's uint64 arithmetic does."""
    v &= _I64 - 1
    return v - _I64 if v >= 2**63 else v


class _Short(Exception):
    """Internal: a varint ran past the end (code -1) or was too long (-2)."""

    def __init__(self, code: int):
        self.code = code


def _rd_varint(buf, p: int, end: int) -> tuple[int, int]:
    v = 0
    for i in range(5):
        if p >= end:
            raise _Short(-1)
        b = buf[p]
        p += 1
        v |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            v &= 0xFFFFFFFF
            r = (v >> 1) ^ -(v & 1)
            return (r - 2**32 if r >= 2**31 else r), p
    raise _Short(-2)


def _rd_varlong(buf, p: int, end: int) -> tuple[int, int]:
    v = 0
    for i in range(10):
        if p >= end:
            raise _Short(-1)
        b = buf[p]
        p += 1
        v |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            v &= _I64 - 1
            r = (v >> 1) ^ -(v & 1)
            return _wrap64(r), p
    raise _Short(-2)


def write_varint(v: int) -> bytes:
    """Zig-zag varint of a signed 32-bit value."""
    return zigzag_varint(v, 32)


def write_varlong(v: int) -> bytes:
    """Zig-zag varint of a signed 64-bit value."""
    return zigzag_varint(v, 64)


def scan(buf, start: int, end: int, crc_mode: int, max_batch_size: int, out: np.ndarray):
    """Walk batches in buf[start:end] into ``out`` (a BATCH_DTYPE array).

    Returns ``(status, n, next_pos, message, err_position, err_base_offset)``.
    """
    mv = memoryview(buf).cast("B")
    if max_batch_size <= 0:
        max_batch_size = INT32_MAX
    pos, n, cap = start, 0, len(out)
    while pos < end:
        if n >= cap:
            return CAPACITY, n, pos, "", -1, NO_OFFSET
        remain = end - pos
        if remain < LOG_OVERHEAD:
            return (TRUNCATED, n, pos,
                    f"truncated batch: {remain} bytes left, fewer than the 12-byte log overhead",
                    pos, NO_OFFSET)
        base_offset, batch_length = struct.unpack_from(">qi", mv, pos)
        size = batch_length + LOG_OVERHEAD
        if batch_length < HEADER_SIZE - LOG_OVERHEAD:
            return (CORRUPT, n, pos,
                    f"batch length {batch_length} is smaller than the minimum {HEADER_SIZE - LOG_OVERHEAD}",
                    pos, base_offset)
        if size > max_batch_size:
            return (CORRUPT, n, pos, f"batch size {size} exceeds the maximum {max_batch_size}",
                    pos, base_offset)
        if remain < 17:
            return (TRUNCATED, n, pos, f"truncated batch: {remain} of {size} bytes present",
                    pos, base_offset)
        magic = struct.unpack_from(">b", mv, pos + 16)[0]
        if magic != 2:
            return (CORRUPT, n, pos,
                    f"unsupported magic {magic} (only record batch v2 is supported)", pos, base_offset)
        if size > remain:
            return (TRUNCATED, n, pos, f"truncated batch: {remain} of {size} bytes present",
                    pos, base_offset)
        (_, _, ple, _, crc, attrs, lod, bts, mts, pid, pep, bseq,
         count) = _HEADER.unpack_from(mv, pos)
        row = out[n]
        row["position"] = pos
        row["base_offset"] = base_offset
        row["size"] = size
        row["partition_leader_epoch"] = ple
        row["magic"] = magic
        row["crc"] = crc
        row["attributes"] = attrs
        row["last_offset_delta"] = lod
        row["base_timestamp"] = bts
        row["max_timestamp"] = mts
        row["producer_id"] = pid
        row["producer_epoch"] = pep
        row["base_sequence"] = bseq
        row["records_count"] = count
        row["_pad"] = 0
        if crc_mode == CRC_SKIP:
            row["crc_valid"] = -1
        else:
            c = crc32c(mv[pos + 21:pos + size])
            row["crc_valid"] = 1 if c == crc else 0
            if c != crc and crc_mode == CRC_VERIFY:
                return (CORRUPT, n, pos, f"CRC mismatch: stored 0x{crc:08x}, computed 0x{c:08x}",
                        pos, base_offset)
        if count < 0:
            return CORRUPT, n, pos, f"negative records count {count}", pos, base_offset
        n += 1
        pos += size
    return OK, n, pos, "", -1, NO_OFFSET


def decode_records(buf, headers: np.ndarray, region_start, region_end, batch_row, cols, first_row: int):
    """Decode the records of each batch row in ``headers`` into ``cols``.

    ``cols`` is the tuple (offset, timestamp, key_pos, key_len, value_pos,
    value_len, headers_pos, headers_count, batch, attributes) of numpy arrays.
    Returns ``(status, n, message, err_position, err_base_offset)``.
    """
    mv = memoryview(buf).cast("B")
    (c_off, c_ts, c_kp, c_kl, c_vp, c_vl, c_hp, c_hc, c_b, c_a) = cols
    cap = len(c_off)
    row = first_row
    buflen = len(mv)
    for bi in range(len(headers)):
        h = headers[bi]
        bpos, bo = int(h["position"]), int(h["base_offset"])
        rs, re_ = int(region_start[bi]), int(region_end[bi])
        if rs < 0 or re_ < rs or re_ > buflen:
            return CORRUPT, row - first_row, f"records region [{rs}, {re_}) outside the buffer", bpos, bo
        count = int(h["records_count"])
        if count * MIN_RECORD_SIZE > re_ - rs:
            return (CORRUPT, row - first_row,
                    f"records count {count} cannot fit in {re_ - rs} bytes of records", bpos, bo)
        if row + count > cap:
            return CAPACITY, row - first_row, "record columns full", bpos, bo
        log_append = bool(int(h["attributes"]) & 0x08)
        bts, mts = int(h["base_timestamp"]), int(h["max_timestamp"])
        brow = int(batch_row[bi]) if batch_row is not None else bi
        p, end = rs, re_
        for i in range(count):
            rec_start = p
            try:
                length, p = _rd_varint(mv, p, end)
                if length < 0 or length > end - p:
                    return (CORRUPT, row - first_row,
                            f"record {i} of the batch has length {length} but {end - p} bytes remain",
                            rec_start, bo)
                rend = p + length
                if p >= rend:
                    return CORRUPT, row - first_row, f"record {i}: empty record", rec_start, bo
                attrs = mv[p]
                attrs = attrs - 256 if attrs >= 128 else attrs
                p += 1
                ts_delta, p = _rd_varlong(mv, p, rend)
                off_delta, p = _rd_varint(mv, p, rend)
                klen, p = _rd_varint(mv, p, rend)
                kpos = p
                if klen < -1 or (klen > 0 and klen > rend - p):
                    return CORRUPT, row - first_row, f"record {i}: invalid key length {klen}", rec_start, bo
                if klen > 0:
                    p += klen
                vlen, p = _rd_varint(mv, p, rend)
                vpos = p
                if vlen < -1 or (vlen > 0 and vlen > rend - p):
                    return (CORRUPT, row - first_row, f"record {i}: invalid value length {vlen}",
                            rec_start, bo)
                if vlen > 0:
                    p += vlen
                hcount, p = _rd_varint(mv, p, rend)
                if hcount < 0:
                    return (CORRUPT, row - first_row, f"record {i}: negative headers count {hcount}",
                            rec_start, bo)
                hpos = p
                for _ in range(hcount):
                    hk, p = _rd_varint(mv, p, rend)
                    if hk < 0 or hk > rend - p:
                        return (CORRUPT, row - first_row, f"record {i}: invalid header key length {hk}",
                                rec_start, bo)
                    p += hk
                    hv, p = _rd_varint(mv, p, rend)
                    if hv < -1 or (hv > 0 and hv > rend - p):
                        return (CORRUPT, row - first_row,
                                f"record {i}: invalid header value length {hv}", rec_start, bo)
                    if hv > 0:
                        p += hv
            except _Short as s:
                what = "varint is too long" if s.code == -2 else "truncated varint"
                return CORRUPT, row - first_row, f"record {i}: {what}", _err_pos(mv, p, s), bo
            if p != rend:
                return (CORRUPT, row - first_row,
                        f"record {i}: declared length {length} but its fields take {p - (rend - length)} bytes",
                        rec_start, bo)
            c_off[row] = _wrap64(bo + off_delta)
            c_ts[row] = mts if log_append else _wrap64(bts + ts_delta)
            c_kp[row] = kpos
            c_kl[row] = klen
            c_vp[row] = vpos
            c_vl[row] = vlen
            c_hp[row] = hpos
            c_hc[row] = hcount
            c_b[row] = brow
            c_a[row] = attrs
            row += 1
        if p != end:
            return (CORRUPT, row - first_row,
                    f"{end - p} bytes left over after the {count} records the batch declares", p, bo)
    return OK, row - first_row, "", -1, NO_OFFSET


def _err_pos(mv, p, s):
    # The C kernel reports the position where the varint started (its cursor
    # is not advanced on failure); _rd_* raise before updating p, so p is it.
    return p


def encode_records(lo: int, hi: int, keys, key_off, key_null, vals, val_off, val_null, ts, base_ts: int) -> bytes:
    """Record bodies of records [lo, hi) of one batch (see kr_encode_records)."""
    out = bytearray()
    for i in range(lo, hi):
        if keys is not None and not (key_null is not None and key_null[i]):
            k = bytes(keys[key_off[i]:key_off[i + 1]])
        else:
            k = None
        if vals is not None and not (val_null is not None and val_null[i]):
            v = bytes(vals[val_off[i]:val_off[i + 1]])
        else:
            v = None
        tsd = _wrap64(int(ts[i]) - base_ts) if ts is not None else 0
        body = bytearray(b"\x00")
        body += write_varlong(tsd)
        body += write_varint(i - lo)
        body += write_varint(-1 if k is None else len(k))
        if k:
            body += k
        body += write_varint(-1 if v is None else len(v))
        if v:
            body += v
        body += b"\x00"
        out += write_varint(len(body))
        out += body
    return bytes(out)


def write_batch(records: bytes, base_offset: int, partition_leader_epoch: int, attributes: int,
                last_offset_delta: int, base_ts: int, max_ts: int, producer_id: int,
                producer_epoch: int, base_sequence: int, records_count: int) -> bytes:
    """A whole batch: header (with CRC) followed by the given records section."""
    size = HEADER_SIZE + len(records)
    head = bytearray(_HEADER.pack(base_offset, size - LOG_OVERHEAD, partition_leader_epoch, 2, 0,
                                  attributes, last_offset_delta, base_ts, max_ts, producer_id,
                                  producer_epoch, base_sequence, records_count))
    crc = crc32c(bytes(head[21:]) + records)
    struct.pack_into(">I", head, 17, crc)
    return bytes(head) + records


def encode_batches(keys, key_off, key_null, vals, val_off, val_null, ts, default_ts: int,
                   per_batch: int, base_offset: int, partition_leader_epoch: int, attributes: int,
                   producer_id: int, producer_epoch: int, base_sequence: int, out=None):
    """Uncompressed batches of at most ``per_batch`` records; returns (bytes, batch positions).

    With ``out`` (a writable buffer), writes there and returns (nbytes, positions).
    """
    n = len(key_off) - 1 if key_off is not None else len(val_off) - 1
    buf = bytearray()
    positions = []
    for lo in range(0, n, per_batch):
        hi = min(lo + per_batch, n)
        base_ts = int(ts[lo]) if ts is not None else default_ts
        max_ts = max(int(t) for t in ts[lo:hi]) if ts is not None else base_ts
        body = encode_records(lo, hi, keys, key_off, key_null, vals, val_off, val_null, ts, base_ts)
        seq = -1 if base_sequence < 0 else (base_sequence + lo) & 0x7FFFFFFF
        positions.append(len(buf))
        buf += write_batch(body, base_offset + lo, partition_leader_epoch, attributes, hi - lo - 1,
                           base_ts, max_ts, producer_id, producer_epoch, seq, hi - lo)
    pos = np.asarray(positions, dtype=np.int64)
    if out is None:
        return bytes(buf), pos
    target = memoryview(out).cast("B")
    if len(target) < len(buf):
        raise ValueError(f"output buffer of {len(target)} bytes is too small: {len(buf)} needed")
    target[:len(buf)] = buf
    return len(buf), pos


def parse_headers(buf, pos: int, count: int) -> tuple:
    """Headers at buf[pos:] (already validated by decode_records) as ((key, value), ...)."""
    mv = memoryview(buf).cast("B")
    out = []
    end = len(mv)
    for _ in range(count):
        hk, pos = _rd_varint(mv, pos, end)
        key = bytes(mv[pos:pos + hk]).decode("utf-8", "replace")
        pos += hk
        hv, pos = _rd_varint(mv, pos, end)
        if hv < 0:
            val = None
        else:
            val = bytes(mv[pos:pos + hv])
            pos += hv
        out.append((key, val))
    return tuple(out)


class Record:
    """One record, for convenience APIs (never used on replay hot paths)."""

    __slots__ = ("offset", "timestamp", "key", "value", "headers", "attributes")

    def __init__(self, offset, timestamp, key, value, headers, attributes=0):
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers
        self.attributes = attributes

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r})")

    def __eq__(self, other):
        if not hasattr(other, "offset"):
            return NotImplemented
        return (self.offset, self.timestamp, self.key, self.value, self.headers) == (
            other.offset, other.timestamp, other.key, other.value, tuple(other.headers))

    __hash__ = None


def make_records(buf, cols, lo: int, hi: int) -> list:
    """Record objects for rows [lo, hi) of decoded columns over ``buf``."""
    mv = memoryview(buf).cast("B")
    (c_off, c_ts, c_kp, c_kl, c_vp, c_vl, c_hp, c_hc, _c_b, c_a) = cols
    out = []
    for r in range(lo, hi):
        kl, vl = int(c_kl[r]), int(c_vl[r])
        kp, vp = int(c_kp[r]), int(c_vp[r])
        key = None if kl < 0 else bytes(mv[kp:kp + kl])
        value = None if vl < 0 else bytes(mv[vp:vp + vl])
        hc = int(c_hc[r])
        headers = parse_headers(mv, int(c_hp[r]), hc) if hc else ()
        out.append(Record(int(c_off[r]), int(c_ts[r]), key, value, headers, int(c_a[r])))
    return out


def iter_records(buf, cols, lo: int, hi: int):
    """Record objects for rows [lo, hi), one at a time."""
    step = 1024
    for a in range(lo, hi, step):
        yield from make_records(buf, cols, a, min(a + step, hi))


def pack_bytes(items):
    """Twin of the native ``pack_bytes``: (joined bytes, int64 offsets[n + 1]) for a sequence
    of exactly-``bytes`` items, else None."""
    items = items if type(items) in (list, tuple) else list(items)
    if not all(type(x) is bytes for x in items):
        return None
    off = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, items), dtype=np.int64, count=len(items)), out=off[1:])
    return b"".join(items), off
