"""Segmented-log figures as JSON (medians of repeated runs).

    python benchmarks/log_report.py [--quick]

Measures: append into the page cache (MB/s, by batch size); small appends
(appends/s, leader and follower, next to a plain pwrite loop); append with
fsync per batch (flush.messages=1) next to a plain write+fdatasync loop of
the same batches in the same run; read by offset (reads/s and MB/s);
offset-index lookups one at a time from Python and batched; recovery scan
of a 1 GiB segment (CRC-verified, index rebuilt).
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from log_workload import fill_log, make_batches  # noqa: E402

from kraft_storage import accel  # noqa: E402
from kraft_storage.log.config import LogConfig  # noqa: E402
from kraft_storage.log.log import KafkaLog  # noqa: E402


def median_of(fn, repeat):
    return statistics.median(fn() for _ in range(repeat))


def bench_append(tmp, batch_bytes, total, verify_crc=True, repeat=5):
    batches = make_batches(batch_bytes, 64)
    size = sum(len(b) for b in batches)
    n = max(total // size, 1)

    def run():
        d = tempfile.mkdtemp(dir=tmp)
        log = KafkaLog.open(d + "/a-0", LogConfig(verify_crc=verify_crc))
        t = time.perf_counter()
        for _ in range(n):
            for b in batches:
                log.append_as_leader(b, 1)
        dt = time.perf_counter() - t
        log.close_uncleanly()
        shutil.rmtree(d)
        return n * size / dt
    return median_of(run, repeat)


def bench_small_appends(tmp, batch_bytes, count=50_000, repeat=5):
    """Appends/s of small batches into the page cache (leader and follower), next
    to a plain ``os.pwrite`` loop of the same bytes in the same run (interleaved,
    so both see the same machine load): the ratio is what the log costs on top
    of the write system call."""
    batches = make_batches(batch_bytes, 64)
    follower = []
    off = 0
    from kraft_storage.record.batch import scan_batches
    for b in batches:  # follower batches carry their own, contiguous offsets
        bb = bytearray(b)
        h = scan_batches(bb).headers
        bb[0:8] = off.to_bytes(8, "big")
        off += int(h["last_offset_delta"][0]) + 1
        follower.append(bytes(bb))
    step = off

    def run_log(mode):
        d = tempfile.mkdtemp(dir=tmp)
        log = KafkaLog.open(d + "/s-0", LogConfig(verify_crc=True))
        # the first append of an epoch fsyncs the epoch checkpoint once: keep it out of the timing
        if mode == "leader":
            log.append_as_leader(batches[0], 1)
            t = time.perf_counter()
            for i in range(count):
                log.append_as_leader(batches[i & 63], 1)
        else:
            log.append_as_follower(follower[0])
            src = [bytearray(b) for b in follower]
            shift = log.log_end_offset
            t = time.perf_counter()
            for i in range(count):
                if not i & 63:  # next round of the same batches, offsets moved on
                    base = shift + (i >> 6) * step
                    for j, b in enumerate(src):
                        b[0:8] = (base + int.from_bytes(follower[j][0:8], "big")).to_bytes(8, "big")
                log.append_as_follower(src[i & 63])
        dt = time.perf_counter() - t
        log.close_uncleanly()
        shutil.rmtree(d)
        return count / dt

    def run_plain():
        d = tempfile.mkdtemp(dir=tmp)
        fd = os.open(d + "/plain.log", os.O_RDWR | os.O_CREAT, 0o644)
        pos = 0
        t = time.perf_counter()
        for i in range(count):
            b = batches[i & 63]
            os.pwrite(fd, b, pos)
            pos += len(b)
        dt = time.perf_counter() - t
        os.close(fd)
        shutil.rmtree(d)
        return count / dt
    lead, foll, plain = [], [], []
    for _ in range(repeat):
        lead.append(run_log("leader"))
        foll.append(run_log("follower"))
        plain.append(run_plain())
    ml, mf, mp = statistics.median(lead), statistics.median(foll), statistics.median(plain)
    return {"batch_bytes": len(batches[0]), "leader_appends_per_s": ml, "follower_appends_per_s": mf,
            "plain_pwrite_per_s": mp, "leader_vs_plain": ml / mp, "follower_vs_plain": mf / mp}


def bench_fsync(tmp, batch_bytes, count=300, repeat=3):
    batches = make_batches(batch_bytes, 16)

    def run_log():
        d = tempfile.mkdtemp(dir=tmp)
        log = KafkaLog.open(d + "/f-0", LogConfig(flush_messages=1))
        log.append_as_leader(batches[-1], 1)  # untimed: the epoch's one-time checkpoint (3 fsyncs)
        t = time.perf_counter()
        for i in range(count):
            log.append_as_leader(batches[i % len(batches)], 1)
        dt = time.perf_counter() - t
        log.close_uncleanly()
        shutil.rmtree(d)
        return dt

    def run_loop():
        d = tempfile.mkdtemp(dir=tmp)
        fd = os.open(d + "/plain.log", os.O_RDWR | os.O_CREAT, 0o644)
        t = time.perf_counter()
        for i in range(count):
            os.write(fd, batches[i % len(batches)])
            os.fdatasync(fd)
        dt = time.perf_counter() - t
        os.close(fd)
        shutil.rmtree(d)
        return dt
    nbytes = sum(len(batches[i % len(batches)]) for i in range(count))
    lg, lp = [], []
    for _ in range(repeat):  # interleave so both see the same disk weather
        lg.append(run_log())
        lp.append(run_loop())
    tl, tp = statistics.median(lg), statistics.median(lp)
    return {"batch_bytes": batch_bytes, "log_batches_per_s": count / tl, "log_MB_per_s": nbytes / tl / 1e6,
            "plain_batches_per_s": count / tp, "plain_MB_per_s": nbytes / tp / 1e6, "ratio": tp / tl}


def bench_read(tmp, repeat=5):
    d = tempfile.mkdtemp(dir=tmp)
    log = fill_log(d + "/r-0", 256 << 20, 16 << 10, LogConfig(segment_bytes=64 << 20))
    end = log.log_end_offset
    rng = np.random.default_rng(1)
    offs = rng.integers(0, end, 20000).tolist()

    def run():
        t = time.perf_counter()
        nb = 0
        for o in offs:
            nb += len(log.read(o, 65536).tobytes())
        dt = time.perf_counter() - t
        return len(offs) / dt, nb / dt / 1e6
    res = [run() for _ in range(repeat)]
    log.close_uncleanly()
    shutil.rmtree(d)
    return {"reads_per_s": statistics.median(r[0] for r in res),
            "MB_per_s": statistics.median(r[1] for r in res), "max_bytes": 65536, "batch_bytes": 16384}


def bench_index(tmp, repeat=5):
    from kraft_storage.log.index import OffsetIndex
    d = tempfile.mkdtemp(dir=tmp)
    n = 100_000
    idx = OffsetIndex(d + "/00000000000000000000.index", 0, n * 8)
    rel = np.arange(n, dtype=np.int64) * 37
    idx.append_relative(rel, np.arange(n, dtype=np.int64) * 4096 + 1)
    rng = np.random.default_rng(2)
    targets = rng.integers(0, n * 37, 1_000_000).astype(np.int64)
    tl = targets[:200_000].tolist()
    lookup = idx.lookup

    def single():
        t = time.perf_counter()
        for x in tl:
            lookup(x)
        return len(tl) / (time.perf_counter() - t)

    def batched():  # allocates the two 8 MB output arrays on every call (page faults included)
        t = time.perf_counter()
        idx.lookup_many(targets)
        return len(targets) / (time.perf_counter() - t)

    out_o = np.empty(len(targets), np.int64)
    out_p = np.empty(len(targets), np.int64)

    def batched_into():  # the kernel alone: outputs preallocated and reused
        t = time.perf_counter()
        idx.lookup_many_into(targets, out_o, out_p)
        return len(targets) / (time.perf_counter() - t)
    out = {"entries": n, "single_per_s": median_of(single, repeat), "batched_per_s": median_of(batched, repeat),
           "batched_into_per_s": median_of(batched_into, repeat)}
    idx.close()
    # the worst case of the radix tier: 90% of the entries crowded into 0.1% of the key range,
    # so the buckets are refused and the lockstep search over the key copy runs
    sk = OffsetIndex(d + "/00000000000000001000.index", 0, n * 8)
    k90 = n * 9 // 10
    sk.append_relative(np.concatenate([np.arange(k90), 10**6 + np.arange(n - k90) * 370]).astype(np.int64),
                       np.arange(n, dtype=np.int64) * 4096 + 1)
    skewed_targets = rng.integers(0, 10**6 + (n - k90) * 370, 1_000_000).astype(np.int64)

    def skewed_into():
        t = time.perf_counter()
        sk.lookup_many_into(skewed_targets, out_o, out_p)
        return len(skewed_targets) / (time.perf_counter() - t)
    out["batched_into_skewed_keys_per_s"] = median_of(skewed_into, repeat)
    sk.close()
    shutil.rmtree(d)
    return out


def bench_recovery(tmp, gib=1.0, repeat=3):
    d = tempfile.mkdtemp(dir=tmp)
    total = int(gib * (1 << 30))
    log = fill_log(d + "/c-0", total, 64 << 10, LogConfig(segment_bytes=2 << 30))
    seg = log.active_segment
    size = seg.size
    log.close_uncleanly()
    from kraft_storage.log.segment import LogSegment
    res = []
    for _ in range(repeat):
        s = LogSegment(d + "/c-0", 0, index_interval_bytes=4096, max_index_size=10 << 20)
        t = time.perf_counter()
        rep = s.recover()
        dt = time.perf_counter() - t
        assert rep.truncated_bytes == 0 and rep.valid_bytes == size
        s.close()
        res.append(size / dt / 1e9)
    shutil.rmtree(d)
    return {"segment_bytes": size, "GB_per_s": statistics.median(res), "batch_bytes": 65536}


def main():
    quick = "--quick" in sys.argv
    tmp = tempfile.mkdtemp(prefix="kraft-log-bench-")
    try:
        out = {"native": accel.WANT_NATIVE and accel.native_available("_index")
               and accel.native_available("_logappend"), "loadavg_at_start": os.getloadavg(),
               "append_page_cache_MB_per_s": {}, "append_page_cache_nocrc_MB_per_s": {}}
        for bb in (4 << 10, 64 << 10, 1 << 20):
            out["append_page_cache_MB_per_s"][bb] = bench_append(tmp, bb, (64 if quick else 512) << 20) / 1e6
            out["append_page_cache_nocrc_MB_per_s"][bb] = bench_append(tmp, bb, (64 if quick else 512) << 20,
                                                                       verify_crc=False) / 1e6
        out["small_appends"] = [bench_small_appends(tmp, bb, 20_000 if quick else 50_000)
                                for bb in (1 << 10, 4 << 10)]
        out["fsync_per_batch"] = [bench_fsync(tmp, bb, 100 if quick else 300) for bb in (1 << 10, 64 << 10)]
        out["read_by_offset"] = bench_read(tmp)
        out["index_lookup"] = bench_index(tmp)
        out["recovery_scan"] = bench_recovery(tmp, 0.125 if quick else 1.0)
        out["loadavg_at_end"] = os.getloadavg()
        print(json.dumps(out, indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
