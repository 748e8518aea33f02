"""Seeded random runs of KafkaLog against a small model of Kafka's rules (issue 19, item 10).

The model is written from Kafka 4's ``LogSegment`` and ``UnifiedLog`` (not from
kraft's code) and keeps whole batches as (first offset, last offset, size, max
timestamp), so what it says is easy to check by eye:

* roll (``LogSegment.shouldRoll``) before an append when the active segment is
  non-empty and: size + append > segment.bytes; or the append's max timestamp minus
  the segment's first batch's max timestamp (when >= 0; else the clock minus the
  segment's creation time) > segment.ms; or an index is full;
* an append larger than segment.bytes is refused, nothing changes;
* index entries (``LogSegment.append``): before adding a batch, if the bytes since the
  last entry exceed index.interval.bytes, an offset entry for it and a time entry
  (max timestamp so far) if that maximum grew; the counter restarts at 0 on every
  load, recovery and truncation; closing (clean), rolling and recovering append the
  final (max timestamp, offset) time entry; recovery rebuilds from the batches,
  keeping the first entries that fit (kraft's choice where Kafka would throw);
* a segment's largest timestamp is the max over its batches (-1 without any);
* retention (``UnifiedLog.deleteOldSegments``): from the oldest, while not the active
  segment, by time while ``now - largest_timestamp > retention.ms``, then by size while
  the log stays >= retention.bytes without it;
* truncation drops whole batches holding offsets >= the target; an emptied segment
  restarts its roll clock (``created``) and forgets its first timestamp.

Each step compares segment bases, sizes, largest timestamps, index entry counts and
log offsets, across clean and unclean restarts.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from kraft_storage.log.config import LogConfig
from kraft_storage.log.errors import RecordBatchTooLargeError
from kraft_storage.log.log import KafkaLog
from kraft_storage.record import build_batch

SEGMENT_BYTES = 2000
SEGMENT_MS = 10_000
INTERVAL = 150
INDEX_BYTES = 48  # 6 offset entries, 4 time entries: index-full rolls happen
MAX_O, MAX_T = INDEX_BYTES // 8, INDEX_BYTES // 12


@dataclass
class MSeg:
    base: int
    created: int
    batches: list = field(default_factory=list)  # (first, last, size, max_ts)
    o: list = field(default_factory=list)        # offset-index entries (offset)
    t: list = field(default_factory=list)        # time-index entries (ts, offset)
    since: int = 0
    max_ts: int = -1
    max_off: int = -1

    @property
    def size(self):
        return sum(b[2] for b in self.batches)

    @property
    def largest(self):
        return max((b[3] for b in self.batches), default=-1)

    def add(self, b, cap=False):
        _first, last, size, ts = b
        if ts > self.max_ts:
            self.max_ts, self.max_off = ts, last
        if self.since > INTERVAL:
            if not (cap and len(self.o) >= MAX_O):
                self.o.append(last)
            if self.max_ts > (self.t[-1][0] if self.t else -1) and not (cap and len(self.t) >= MAX_T):
                self.t.append((self.max_ts, self.max_off))
            self.since = 0
        self.since += size
        self.batches.append(b)

    def final_time_entry(self):
        if self.max_ts >= 0 and self.max_ts > (self.t[-1][0] if self.t else -1):
            self.t.append((self.max_ts, self.max_off))

    def rebuild(self):
        batches, self.batches, self.o, self.t = self.batches, [], [], []
        self.since, self.max_ts, self.max_off = 0, -1, -1
        for b in batches:
            self.add(b, cap=True)  # a rebuild keeps the first entries that fit (see recover)
        self.final_time_entry()
        self.since = 0

    def full(self):
        return len(self.o) >= MAX_O or len(self.t) >= MAX_T


class Model:
    def __init__(self, now):
        self.segs = [MSeg(0, now)]
        self.start = 0
        self.end = 0

    def append(self, n, size, ts, now):
        if size > SEGMENT_BYTES:
            return "too large"
        a = self.segs[-1]
        if a.batches:
            first_ts = a.batches[0][3]
            waited = ts - first_ts if first_ts >= 0 else now - a.created
            if a.size > SEGMENT_BYTES - size or waited > SEGMENT_MS or a.full():
                self.roll(now)
        self.segs[-1].add((self.end, self.end + n - 1, size, ts))
        self.end += n

    def roll(self, now):
        a = self.segs[-1]
        if a.batches:
            a.final_time_entry()
            self.segs.append(MSeg(self.end, now))

    def truncate(self, off, now):
        if off >= self.end:
            return
        self.segs = [s for s in self.segs if s.base <= off] or self.segs[:1]
        a = self.segs[-1]
        a.batches = [b for b in a.batches if b[1] < off]
        a.o = [x for x in a.o if x < off]
        a.t = [x for x in a.t if x[1] < off]
        a.since = 0
        a.max_ts = max((b[3] for b in a.batches), default=-1)
        a.max_off = next((b[1] for b in a.batches if b[3] == a.max_ts), -1)
        if not a.batches:
            a.created = now
        self.end = a.batches[-1][1] + 1 if a.batches else a.base
        if self.end < self.start:
            self.segs = [MSeg(self.start, now)]
            self.end = self.start

    def delete_old(self, now, rms, rbytes):
        out = []
        if rms >= 0:
            while len(self.segs) > 1 and now - self.segs[0].largest > rms:
                out.append(self.segs.pop(0).base)
        if rbytes >= 0:
            diff = sum(s.size for s in self.segs) - rbytes
            while len(self.segs) > 1 and diff - self.segs[0].size >= 0:
                diff -= self.segs[0].size
                out.append(self.segs.pop(0).base)
        self.start = max(self.start, self.segs[0].base)
        return out

    def restart(self, clean, now):
        for s in self.segs[:-1]:
            s.since = 0
        a = self.segs[-1]
        if clean:
            a.final_time_entry()
            a.since = 0
        else:
            for s in self.segs:
                s.rebuild()
        a.created = now


def check(log, m):
    segs = log.segments
    assert [s.base_offset for s in segs] == [s.base for s in m.segs]
    assert [s.size for s in segs] == [s.size for s in m.segs]
    assert [s.largest_timestamp for s in segs] == [s.largest for s in m.segs]
    assert (log.log_start_offset, log.log_end_offset) == (m.start, m.end)
    a, ma = segs[-1], m.segs[-1]
    assert (a.offset_index.entries, a.time_index.entries) == (len(ma.o), len(ma.t))
    assert a.time_index.last_entry()[0] == (ma.t[-1][0] if ma.t else -1)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("interval,index_bytes", [(150, 48), (0, 36)], ids=["sparse", "every-batch"])
def test_log_matches_kafka_rules_model(tmp_path, monkeypatch, seed, interval, index_bytes):
    # "every-batch": an index entry per batch, so index-full rolls are frequent
    mod = globals()
    for k, v in (("INTERVAL", interval), ("INDEX_BYTES", index_bytes), ("MAX_O", index_bytes // 8),
                 ("MAX_T", index_bytes // 12)):
        monkeypatch.setitem(mod, k, v)
    rnd = random.Random(seed)
    d = tmp_path / "m-0"
    t0 = 1_700_000_000_000
    clock = [t0]
    cfg = LogConfig(segment_bytes=SEGMENT_BYTES, segment_ms=SEGMENT_MS, index_interval_bytes=INTERVAL,
                    segment_index_bytes=INDEX_BYTES, retention_ms=-1)
    log = KafkaLog.open(d, cfg, clock=lambda: clock[0])
    m = Model(clock[0])
    ts_hi = t0
    for step in range(160):
        op = rnd.choices(["append", "clock", "roll", "truncate", "retention", "clean", "crash"],
                         [60, 8, 3, 5, 5, 4, 4])[0]
        if op == "append":
            n = rnd.randint(1, 4)
            vsize = rnd.choice([1, 10, 40, 120, 300])
            if rnd.random() < 0.02:
                vsize = 700  # > segment.bytes with 3+ records
            ts = rnd.choice([ts_hi + rnd.randint(0, 4000), ts_hi - rnd.randint(0, 20_000), t0 - 5000])
            ts_hi = max(ts_hi, ts)
            raw = build_batch([(None, b"x" * vsize) for _ in range(n)], timestamp=ts)
            want = m.append(n, len(raw), ts, clock[0])
            if want == "too large":
                with pytest.raises(RecordBatchTooLargeError):
                    log.append_as_leader(raw, 1)
            else:
                log.append_as_leader(raw, 1)
        elif op == "clock":
            clock[0] += rnd.choice([1000, 6000, 11_000])
        elif op == "roll":
            log.roll()
            m.roll(clock[0])
        elif op == "truncate" and m.end > m.start:
            off = rnd.randint(m.start, m.end)
            log.truncate_to(off)
            m.truncate(off, clock[0])
        elif op == "retention":
            if rnd.random() < 0.5:
                rms = rnd.choice([5_000, 30_000, 3_600_000])
                got = log.delete_old_segments(retention_ms=rms, retention_bytes=-1)
                assert got == m.delete_old(clock[0], rms, -1), step
            else:
                rb = rnd.choice([500, 1500, 3000])
                got = log.delete_old_segments(retention_ms=-1, retention_bytes=rb)
                assert got == m.delete_old(clock[0], -1, rb), step
        elif op in ("clean", "crash"):
            if op == "clean":
                log.close()
            else:
                log.close_uncleanly()
            log = KafkaLog.open(d, cfg, clock=lambda: clock[0], log_start_offset=m.start)
            assert log.load_report.clean_shutdown == (op == "clean")
            assert log.load_report.truncated_bytes == 0
            m.restart(op == "clean", clock[0])
        check(log, m)
    log.close()
