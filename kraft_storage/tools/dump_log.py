"""``kraft-dump-log``: print the batches and records of Kafka log files.

Like Kafka's ``kafka-dump-log.sh --print-data-log`` (with the
``--cluster-metadata-decoder`` behaviour built in) over any file of
concatenated record batches: ``.log`` segments, ``.checkpoint`` snapshots,
``bootstrap.checkpoint``.

Output:
* default: human-readable lines, one per batch followed by one per record;
* ``--json``: JSON Lines, one object per batch with the fields listed in
  ``BATCH_FIELDS`` and ``records`` (offset, timestamp, key, value, headers;
  key/value/header values in base64, null as null).  Where the generated
  message codecs are available, metadata records gain a ``metadata`` member
  and control records a ``control`` member.

Index files: ``.index`` and ``.timeindex`` are printed entry by entry as
Kafka's tool does (``offset: O position: P`` / ``timestamp: T offset: O``)
and checked against the ``.log`` beside them: every offset-index entry must
name the position of a batch whose last offset is the entry's offset, every
time-index entry the max timestamp of the batch ending at its offset, and
both must increase.  Problems are listed after the entries (``Mismatches
in :FILE`` etc., Kafka's wording) and make the exit code 1.
``--verify-index-only`` prints only the problems.

Damage: every good batch before the corrupt point is printed, then the problem
is named on stderr (file, byte position, what was found there; the batch base
offset only when the header looks like a batch's) and the exit code is 1.  A
file with no batch at position 0 is said not to be a segment or snapshot.

Record values that are not metadata record frames (a value whose first byte
is not frame version 1, e.g. ``kraft-server-start --demo-writer``'s records)
are opaque: printed as text when printable (base64 otherwise, and always in
``--json``), without a decode error.  A batch whose CRC does not match is printed with ``crcValid: false``
and without its records (they cannot be trusted), and also makes the exit
code 1.
"""
from __future__ import annotations

import argparse
import base64
import json
import mmap
import os
import sys

from kraft_storage.errors import CorruptRecordError, KraftStorageError
from kraft_storage.record import CRC_REPORT, decode_record_columns, scan_batches
from kraft_storage.record.constants import COMPRESSION_MASK, CONTROL_MASK, TRANSACTIONAL_MASK, Compression

BATCH_FIELDS = ("baseOffset", "lastOffset", "count", "position", "size", "magic", "crc", "crcValid",
                "compression", "isControl", "isTransactional", "partitionLeaderEpoch", "producerId",
                "producerEpoch", "baseSequence", "baseTimestamp", "maxTimestamp", "records")


def _decoders():
    """The message decoders, if the generated codecs are present."""
    try:
        from kraft_storage.messages import dump  # generated codecs (issue 3)
        return dump.metadata_json, dump.control_json
    except ImportError:
        return None, None


def _b64(b):
    return None if b is None else base64.b64encode(b).decode("ascii")


def _open(path):
    """(buffer, closer): the file mmap'd read-only (or empty bytes)."""
    f = open(path, "rb")
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        f.close()
        return b"", lambda: None
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    f.close()
    return m, m.close


def _batch_obj(h) -> dict:
    attrs = int(h["attributes"])
    return {
        "baseOffset": int(h["base_offset"]),
        "lastOffset": int(h["base_offset"]) + int(h["last_offset_delta"]),
        "count": int(h["records_count"]),
        "position": int(h["position"]),
        "size": int(h["size"]),
        "magic": int(h["magic"]),
        "crc": int(h["crc"]),
        "crcValid": bool(h["crc_valid"] == 1),
        "compression": Compression(attrs & COMPRESSION_MASK).name.lower()
        if (attrs & COMPRESSION_MASK) <= 4 else f"unknown({attrs & COMPRESSION_MASK})",
        "isControl": bool(attrs & CONTROL_MASK),
        "isTransactional": bool(attrs & TRANSACTIONAL_MASK),
        "partitionLeaderEpoch": int(h["partition_leader_epoch"]),
        "producerId": int(h["producer_id"]),
        "producerEpoch": int(h["producer_epoch"]),
        "baseSequence": int(h["base_sequence"]),
        "baseTimestamp": int(h["base_timestamp"]),
        "maxTimestamp": int(h["max_timestamp"]),
    }


def _record_objs(buf, headers, i, decode_meta, decode_ctrl, errors):
    """Records of batch row i as dicts (decoding metadata/control bodies if possible)."""
    cols = decode_record_columns(buf, headers[i:i + 1])
    control = bool(int(headers[i]["attributes"]) & CONTROL_MASK)
    out = []
    for r in cols.records():
        o = {"offset": r.offset, "timestamp": r.timestamp, "key": _b64(r.key), "value": _b64(r.value),
             "headers": [{"key": k, "value": _b64(v)} for k, v in r.headers]}
        try:
            if control and decode_ctrl is not None and r.key is not None:
                o["control"] = decode_ctrl(r.key, r.value)
            elif not control and decode_meta is not None and r.key is None and r.value is not None \
                    and _is_metadata_frame(r.value):
                o["metadata"] = decode_meta(r.value)
        except Exception as exc:  # not a metadata log, or an unknown record: keep going
            o["decodeError"] = str(exc)
            errors.append(exc)
        out.append(o)
    return out


def _is_metadata_frame(value: bytes) -> bool:
    """Does ``value`` start like a metadata record frame (frame version 1, an unsigned
    varint: the byte 0x01)?  Anything else -- the demo writer's ``<node>-<pid>-<seq>``
    records, a state machine's own bytes -- is an opaque value, printed as it is, not a
    metadata record that failed to decode (which printed one error per record)."""
    return len(value) > 0 and value[0] == 1


def _text(value: bytes) -> str | None:
    """``value`` as text when it is printable UTF-8 (Kafka's dump tool prints payloads as strings)."""
    try:
        t = value.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return t if t.isprintable() else None


def _found(head: bytes, left: int) -> str:
    """What is at a position where a record batch was expected (``head``: up to 32 bytes of
    it, ``left`` bytes to the end of the file), in words."""
    if not head:
        return "the end of the file"
    if not any(head):
        return f"zero bytes (a zero-filled or preallocated region? {left} bytes to the end of the file)"
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        text = None
    if text is not None and all(c.isprintable() or c in "\r\n\t" for c in text):
        return f"text {text!r}"
    return "bytes " + head[:16].hex(" ")


def _scan_error_message(path: str, buf, exc, good: int) -> str:
    """The scan's error in words: where (file, byte position), what was expected (a v2 record
    batch) and what was found there.  The base offset is given only when the header looks
    like a batch's (magic 2): from random bytes it was a garbage number."""
    pos = exc.position if getattr(exc, "position", -1) >= 0 else 0
    reason = getattr(exc, "reason", str(exc))
    size = len(buf)
    magic = buf[pos + 16] if pos + 16 < size else None
    found = _found(bytes(buf[pos:pos + 32]), size - pos)
    if pos == 0 and good == 0 and magic != 2:
        return (f"{path}: not a Kafka log segment or snapshot: no v2 record batch at byte position 0: "
                f"{reason}; found {found}")
    where = f"byte position {pos}"
    if magic == 2 and getattr(exc, "base_offset", None) is not None:
        where += f", batch base offset {exc.base_offset}"
    return (f"{path}: no valid record batch at {where}, after {good} good batch{'es' if good != 1 else ''}: "
            f"{reason}; found {found}")


def _print_human(path, b, recs, out):
    out.write(
        f"baseOffset: {b['baseOffset']} lastOffset: {b['lastOffset']} count: {b['count']} "
        f"baseSequence: {b['baseSequence']} lastSequence: "
        f"{-1 if b['baseSequence'] < 0 else b['baseSequence'] + b['lastOffset'] - b['baseOffset']} "
        f"producerId: {b['producerId']} producerEpoch: {b['producerEpoch']} "
        f"partitionLeaderEpoch: {b['partitionLeaderEpoch']} isTransactional: "
        f"{str(b['isTransactional']).lower()} isControl: {str(b['isControl']).lower()} "
        f"position: {b['position']} CreateTime: {b['maxTimestamp']} size: {b['size']} "
        f"magic: {b['magic']} compresscodec: {b['compression']} crc: {b['crc']} "
        f"isvalid: {str(b['crcValid']).lower()}\n")
    for r in recs or ():
        line = f"| offset: {r['offset']} CreateTime: {r['timestamp']} keySize: " \
               f"{-1 if r['key'] is None else len(base64.b64decode(r['key']))} valueSize: " \
               f"{-1 if r['value'] is None else len(base64.b64decode(r['value']))}"
        if "metadata" in r:
            line += " payload: " + json.dumps(r["metadata"], separators=(",", ":"))
        elif "control" in r:
            line += " " + json.dumps(r["control"], separators=(",", ":"))
        elif r["value"] is not None:
            raw = base64.b64decode(r["value"])
            text = None if _is_metadata_frame(raw) else _text(raw)
            line += f" payload: {text}" if text is not None else f" payload: {r['value']}"
        if r["headers"]:
            line += " headers: " + json.dumps(r["headers"], separators=(",", ":"))
        out.write(line + "\n")


def dump_file(path: str, as_json: bool, out=sys.stdout, err=sys.stderr, print_records: bool = True) -> int:
    """Dump one file; return 0 if it was entirely sound, 1 otherwise."""
    try:
        buf, close = _open(path)
    except OSError as exc:
        err.write(f"kraft-dump-log: {path}: {exc.strerror or exc}\n")
        return 1
    status = 0
    decode_meta, decode_ctrl = _decoders()
    try:
        if not as_json:
            out.write(f"Dumping {path}\n")
        scan = scan_batches(buf, crc_mode=CRC_REPORT, raise_on_error=False, source=path)
        headers = scan.headers
        for i in range(len(headers)):
            b = _batch_obj(headers[i])
            recs = None
            if not b["crcValid"]:
                err.write(f"kraft-dump-log: {path}: CRC mismatch in the batch at position "
                          f"{b['position']} (base offset {b['baseOffset']}); records not printed\n")
                status = 1
            elif print_records:
                errors: list = []
                try:
                    recs = _record_objs(buf, headers, i, decode_meta, decode_ctrl, errors)
                except (CorruptRecordError, KraftStorageError) as exc:
                    err.write(f"kraft-dump-log: {path}: {exc}\n")
                    status = 1
                for exc in errors[:1]:
                    err.write(f"kraft-dump-log: {path}: could not decode a record body in the batch "
                              f"at offset {b['baseOffset']}: {exc}\n")
            if as_json:
                b["records"] = recs if recs is not None else []
                out.write(json.dumps(b, separators=(",", ":")) + "\n")
            else:
                _print_human(path, b, recs, out)
        if scan.error is not None:
            err.write(f"kraft-dump-log: {_scan_error_message(path, buf, scan.error, len(headers))}\n")
            status = 1
    finally:
        del buf
        close()
    return status


def _index_entries(path: str):
    """(kind, base_offset, entries array) of a .index / .timeindex file."""
    import numpy as np

    from kraft_storage.log.index import OFFSET_ENTRY, TIME_ENTRY
    name = os.path.basename(path)
    base = int(name.split(".")[0])
    dtype = OFFSET_ENTRY if path.endswith(".index") else TIME_ENTRY
    with open(path, "rb") as f:
        raw = f.read()
    usable = len(raw) - len(raw) % dtype.itemsize
    return ("offset" if dtype is OFFSET_ENTRY else "time"), base, np.frombuffer(raw[:usable], dtype=dtype), \
        len(raw) % dtype.itemsize


def dump_index(path: str, verify_only: bool = False, out=None, err=None) -> int:
    """Print (or only verify) a .index / .timeindex file against its .log; 0 when consistent."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    try:
        kind, base, entries, stray = _index_entries(path)
    except (OSError, ValueError) as exc:
        err.write(f"kraft-dump-log: {path}: {exc}\n")
        return 1
    log_path = path[: path.rindex(".")] + ".log"
    if not verify_only:
        out.write(f"Dumping {path}\n")
    problems: list[str] = []
    if stray:
        problems.append(f"Index file size is not a multiple of the entry size in :{path}\n"
                        f"  {stray} stray bytes at the end")
    try:
        buf, close = _open(log_path)
    except OSError as exc:
        err.write(f"kraft-dump-log: {path}: cannot read the segment {log_path}: {exc.strerror or exc}\n")
        return 1
    try:
        scan = scan_batches(buf, crc_mode=CRC_REPORT, raise_on_error=False, source=log_path)
        h = scan.headers
        last_by_pos = dict(zip(h["position"].tolist(), (h["base_offset"] + h["last_offset_delta"]).tolist()))
        ts_by_last = dict(zip((h["base_offset"] + h["last_offset_delta"]).tolist(), h["max_timestamp"].tolist()))
    finally:
        close()
    mismatches, disorder = [], []
    prev = None
    for i in range(len(entries)):
        if kind == "offset":
            off = base + int(entries["rel"][i])
            pos = int(entries["pos"][i])
            if i > 0 and off == base:  # the zero-filled, preallocated tail of an active index
                break
            log_off = last_by_pos.get(pos)
            if log_off != off:
                mismatches.append(f"  Index offset: {off}, log offset: {'none' if log_off is None else log_off}")
            if prev is not None and off <= prev:
                disorder.append(f"  Index offset: {off}, Previously indexed offset: {prev}")
            prev = off
            if not verify_only:
                out.write(f"offset: {off} position: {pos}\n")
        else:
            ts = int(entries["ts"][i])
            off = base + int(entries["rel"][i])
            if i > 0 and ts == 0 and off == base:
                break
            log_ts = ts_by_last.get(off)
            if log_ts != ts:
                mismatches.append(f"  Index timestamp: {ts}, log timestamp: {'none' if log_ts is None else log_ts}")
            if prev is not None and ts <= prev:
                disorder.append(f"  Index timestamp: {ts}, Previously indexed timestamp: {prev}")
            prev = ts
            if not verify_only:
                out.write(f"timestamp: {ts} offset: {off}\n")
    if mismatches:
        head = "Mismatches in :" if kind == "offset" else "Found timestamp mismatch in :"
        problems.append(head + path + "\n" + "\n".join(mismatches))
    if disorder:
        head = "Indexes not monotonic in :" if kind == "offset" else "Found out of order timestamp in :"
        problems.append(head + path + "\n" + "\n".join(disorder))
    for p in problems:
        out.write(p + "\n")
    return 1 if problems else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="kraft-dump-log",
        description="Print the record batches of Kafka log segments and snapshot checkpoints.")
    p.add_argument("files", nargs="*", metavar="FILE", help=".log, .checkpoint or bootstrap.checkpoint files")
    p.add_argument("--example", action="store_true",
                   help="write kraft's bundled example metadata log to a temporary directory and dump it")
    p.add_argument("--json", action="store_true", help="JSON Lines output, one object per batch")
    p.add_argument("--batches-only", action="store_true", help="print batch headers without records")
    p.add_argument("--verify-index-only", action="store_true",
                   help="for .index/.timeindex files: check the entries against the .log, print only problems")
    args = p.parse_args(argv)
    if args.example:
        import tempfile

        from kraft_storage.tools.example import write_example_log
        with tempfile.TemporaryDirectory(prefix="kraft-example-") as tmp:
            return _dump_all([write_example_log(tmp)], args)
    if not args.files:
        p.error("give at least one FILE, or --example")
    return _dump_all(args.files, args)


def _dump_all(files, args) -> int:
    rc = 0
    for path in files:
        try:
            if path.endswith((".index", ".timeindex")):
                rc |= dump_index(path, verify_only=getattr(args, "verify_index_only", False))
            else:
                rc |= dump_file(path, args.json, print_records=not args.batches_only)
        except BrokenPipeError:
            return rc
    return rc


if __name__ == "__main__":
    sys.exit(main())
