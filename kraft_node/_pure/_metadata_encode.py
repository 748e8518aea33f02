"""Metadata response partitions from a partition block's columns: the pure-Python (numpy) twin of
``kraft_node._native._metadata_encode`` (and its oracle in the tests).

Why a kernel: the first "all topics" Metadata answer after the cluster changes (a broker fenced:
every partition's offline replicas change) re-encodes every partition; at 5,000 topics x 10
partitions this twin takes ~18 ms on a quiet machine (broker lookups, list filters and one
structured array per row shape), the native loop ~1 ms.  Issue 24's target for the first answer
after a new image is 10 ms.  The caller (:mod:`kraft_node.broker.metadata_encoding`) computes the
directory part (``offline_extra``) and slices a topic's rows out of the buffer.

``encode_metadata_partitions(version, partition_id, leader, leader_epoch, replicas,
replicas_offsets, isr, isr_offsets, broker_ids, broker_usable, broker_has_listener,
offline_extra)`` -> ``(buffer, row_offsets)``: every row ``i`` of the block encoded as one
``MetadataResponsePartition`` at ``version`` in ``buffer[row_offsets[i]:row_offsets[i + 1]]``
(``row_offsets`` int64[n + 1], from 0).  Columns are int32 arrays (``*_offsets`` int32[n + 1]
into the list arrays, not necessarily from 0); ``broker_ids`` int32 sorted ascending, with
``broker_usable`` / ``broker_has_listener`` uint8 flags of the same length (usable: registered,
unfenced, with the listener); ``offline_extra``: None or a uint8 flag per replica element from
``replicas_offsets[0]`` (its directory is offline).

One partition's bytes (Kafka's ``getPartitionMetadata``; the errors and lists as
:func:`kraft_node.broker.metadata_cache.partition_view`)::

    error_code int16 | partition_index int32 | leader_id int32 | leader_epoch int32 (v7+)
    | replica_nodes | isr_nodes | offline_replicas (v5+) | tagged fields 0x00 (v9+)

each list an int32 count (v0-8) or the unsigned varint count + 1 (v9+; one byte, so a list of
127 or more raises ValueError and the caller falls back to the generated encoder), then
big-endian int32s.  Offline replicas: those not usable or in an offline directory.  v0 lists
only usable replicas and usable ISR members and answers REPLICA_NOT_AVAILABLE when that drops
any; the leader is -1 with LISTENER_NOT_FOUND (v6+; LEADER_NOT_AVAILABLE before) when it is
registered without the listener, and LEADER_NOT_AVAILABLE when it is not registered.

``assemble_topics(prefixes, buffers, which, starts, stops, suffix)`` -> ``list[bytes]``: topic
``i``'s bytes ``prefixes[i] + buffers[which[i]][starts[i]:stops[i]] + suffix`` (a topic's
partitions are a slice of its block's encoded rows; ``which`` int32, ``starts``/``stops``
int64 byte offsets).  An index outside ``buffers`` or a slice outside its buffer raises
IndexError naming the topic.

``join_slices(buffers, which, starts, stops)`` -> ``bytes``: ``buffers[which[i]][starts[i]:stops[i]]``
for every ``i``, concatenated (``which`` int32, ``starts``/``stops`` int64, ``buffers`` a list
of bytes).  Why: the first all-topics answer after a cluster change is every topic's old prefix,
its block's new rows and its old suffix, and the response frame's ends around them -- 3 slices
a topic, copied once.  Every slice is checked before anything is copied: IndexError naming the
slice; a buffer that is not bytes is a TypeError, arrays of different lengths a ValueError.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["LEADER_NOT_AVAILABLE", "LISTENER_NOT_FOUND", "REPLICA_NOT_AVAILABLE", "assemble_topics",
           "encode_metadata_partitions", "join_slices"]

#: Kafka's error codes (kraft_node.protocol.errors.Errors; a kernel imports nothing above it,
#: the tests check these equal the enum)
LEADER_NOT_AVAILABLE = 5
REPLICA_NOT_AVAILABLE = 9
LISTENER_NOT_FOUND = 72


def _lookup(ids: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(ids) == 0:
        return np.zeros(len(values), dtype=np.bool_), np.zeros(len(values), dtype=np.intp)
    idx = np.searchsorted(ids, values)
    np.minimum(idx, len(ids) - 1, out=idx)
    return ids[idx] == values, idx


def _rows_of(offsets: np.ndarray, n: int) -> np.ndarray:
    return np.repeat(np.arange(n, dtype=np.intp), np.diff(offsets))


def _filter(values: np.ndarray, rows: np.ndarray, keep: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    return values[keep], np.bincount(rows[keep], minlength=n).astype(np.int32)


def encode_metadata_partitions(version: int, partition_id: Any, leader: Any, leader_epoch: Any, replicas: Any,
                               replicas_offsets: Any, isr: Any, isr_offsets: Any, broker_ids: Any,
                               broker_usable: Any, broker_has_listener: Any,
                               offline_extra: Any = None) -> tuple[bytes, np.ndarray]:
    n = len(partition_id)
    if n == 0:
        return b"", np.zeros(1, dtype=np.int64)
    ids = np.asarray(broker_ids, dtype=np.int32)
    usable_flags = np.asarray(broker_usable).astype(np.bool_)
    listener_flags = np.asarray(broker_has_listener).astype(np.bool_)
    ro = np.asarray(replicas_offsets)
    io = np.asarray(isr_offsets)
    reps = np.asarray(replicas)[ro[0]:ro[-1]]
    rep_counts = np.diff(ro).astype(np.int32)
    rep_rows = _rows_of(ro, n)
    isr_all = np.asarray(isr)[io[0]:io[-1]]
    isr_counts = np.diff(io).astype(np.int32)
    isr_rows = _rows_of(io, n)

    found, idx = _lookup(ids, reps)
    usable = found & usable_flags[idx] if len(ids) else found
    offline_mask = ~usable
    if offline_extra is not None:
        offline_mask |= np.asarray(offline_extra).astype(np.bool_)
    off_vals, off_counts = _filter(reps, rep_rows, offline_mask, n)

    leaders = np.asarray(leader)
    lfound, lidx = _lookup(ids, leaders)
    l_listener = lfound & listener_flags[lidx] if len(ids) else lfound
    if version == 0:
        isr_found, isr_idx = _lookup(ids, isr_all)
        isr_ok = isr_found & usable_flags[isr_idx] if len(ids) else isr_found
        rep_vals, rep_out = _filter(reps, rep_rows, usable, n)
        isr_vals, isr_out = _filter(isr_all, isr_rows, isr_ok, n)
        short = (rep_out < rep_counts) | (isr_out < isr_counts)
    else:
        rep_vals, rep_out, isr_vals, isr_out = reps, rep_counts, isr_all, isr_counts
        short = np.zeros(n, dtype=np.bool_)
    error = np.where(short, np.int16(REPLICA_NOT_AVAILABLE), np.int16(0)).astype(np.int16)
    error[lfound & ~l_listener] = LISTENER_NOT_FOUND if version >= 6 else LEADER_NOT_AVAILABLE
    error[~lfound] = LEADER_NOT_AVAILABLE
    leader_id = np.where(l_listener, leaders, np.int32(-1)).astype(np.int32)

    lists: list[tuple[np.ndarray, np.ndarray]] = [(rep_vals, rep_out), (isr_vals, isr_out)]
    if version >= 5:
        lists.append((off_vals, off_counts))
    flexible = version >= 9
    if flexible and any(int(c.max()) >= 127 for _, c in lists):
        raise ValueError("a replica list of 127 or more brokers needs a multi-byte varint")
    head = 10 + (4 if version >= 7 else 0)
    plen = 1 if flexible else 4
    sizes = np.full(n, head + (1 if flexible else 0), dtype=np.int64)
    for _, counts in lists:
        sizes += plen + 4 * counts.astype(np.int64)
    row_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=row_offsets[1:])
    out = np.zeros(int(row_offsets[-1]), dtype=np.uint8)
    firsts = [np.concatenate(([0], np.cumsum(c))).astype(np.int64) for _, c in lists]

    # rows grouped by shape (the counts of each list): one structured array a group, filled
    # column-wise, stored at its rows' positions (a healthy cluster has one shape)
    shape_key = np.zeros(n, dtype=np.int64)
    for _, counts in lists:
        shape_key = shape_key * 128 + counts
    if int(shape_key.min()) == int(shape_key.max()):
        groups: list[np.ndarray] = [np.arange(n, dtype=np.intp)]
    else:
        order = np.argsort(shape_key, kind="stable")
        bounds = np.flatnonzero(np.diff(shape_key[order])) + 1
        groups = np.split(order, bounds)
    pids = np.asarray(partition_id)
    epochs = np.asarray(leader_epoch)
    for rows in groups:
        r0 = int(rows[0])
        counts_here = [int(c[r0]) for _, c in lists]
        fields: list[tuple[Any, ...]] = [("e", ">i2"), ("p", ">i4"), ("l", ">i4")]
        if version >= 7:
            fields.append(("ep", ">i4"))
        for k, c in enumerate(counts_here):
            fields.append((f"n{k}", "u1" if flexible else ">i4"))
            if c:
                fields.append((f"v{k}", ">i4", (c,)))
        if flexible:
            fields.append(("tag", "u1"))
        rec = np.zeros(len(rows), dtype=np.dtype(fields))
        rec["e"] = error[rows]
        rec["p"] = pids[rows]
        rec["l"] = leader_id[rows]
        if version >= 7:
            rec["ep"] = epochs[rows]
        for k, c in enumerate(counts_here):
            rec[f"n{k}"] = c + 1 if flexible else c
            if c:
                vals = lists[k][0]
                first = firsts[k][rows]
                rec[f"v{k}"] = vals[first[:, None] + np.arange(c)]
        raw = rec.view(np.uint8).reshape(len(rows), rec.dtype.itemsize)
        if len(groups) == 1:
            out[:] = raw.reshape(-1)
        else:
            out[row_offsets[rows][:, None] + np.arange(rec.dtype.itemsize)] = raw
    return out.tobytes(), row_offsets


def assemble_topics(prefixes: Any, buffers: Any, which: Any, starts: Any, stops: Any, suffix: bytes) -> list[bytes]:
    n = len(prefixes)
    if not (len(which) == len(starts) == len(stops) == n):
        raise ValueError("prefixes, which, starts and stops have different lengths")
    views = [memoryview(b) for b in buffers]
    out = []
    for i, (prefix, w, a, b) in enumerate(zip(prefixes, np.asarray(which).tolist(), np.asarray(starts).tolist(),
                                               np.asarray(stops).tolist())):
        if not 0 <= w < len(views) or not 0 <= a <= b <= len(views[w]):
            raise IndexError(f"topic {i}: slice [{a}, {b}) of buffer {w} is outside the buffers")
        out.append(b"".join((prefix, views[w][a:b], suffix)))
    return out


def join_slices(buffers: Any, which: Any, starts: Any, stops: Any) -> bytes:
    m = len(which)
    if not (len(starts) == len(stops) == m):
        raise ValueError("which, starts and stops have different lengths")
    for i, buf in enumerate(buffers):
        if type(buf) is not bytes:
            raise TypeError(f"buffer {i} is a {type(buf).__name__}, not bytes")
    w = np.asarray(which, dtype=np.int64)
    a = np.asarray(starts, dtype=np.int64)
    b = np.asarray(stops, dtype=np.int64)
    sizes = np.array([len(x) for x in buffers] + [-1], dtype=np.int64)
    bad = (w < 0) | (w >= len(buffers)) | (a < 0) | (b < a) | (b > sizes[np.clip(w, -1, len(buffers))])
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise IndexError(f"slice {i}: [{int(a[i])}, {int(b[i])}) of buffer {int(which[i])} is outside the buffers")
    # empty slices dropped and slices that continue the previous one in the same buffer merged:
    # the Python loop below is then one step a run (a new image's kept topics are one run)
    keep = b > a
    w, a, b = w[keep], a[keep], b[keep]
    if len(w) == 0:
        return b""
    first = np.ones(len(w), dtype=np.bool_)
    first[1:] = (w[1:] != w[:-1]) | (a[1:] != b[:-1])
    heads = np.flatnonzero(first)
    tails = np.append(heads[1:], len(w)) - 1
    views = [memoryview(x) for x in buffers]
    return b"".join(views[x][y:z] for x, y, z in zip(w[heads].tolist(), a[heads].tolist(), b[tails].tolist()))
