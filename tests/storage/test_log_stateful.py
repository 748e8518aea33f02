"""Random operation sequences against a plain in-memory model of the log (hypothesis stateful)."""
from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kraft_storage.log.config import LogConfig
from kraft_storage.log.log import KafkaLog
from kraft_storage.record import build_batch, scan_batches

CFG = LogConfig(segment_bytes=700, index_interval_bytes=90, segment_index_bytes=160)


def model_epochs(batches, start):
    """Epoch entries from the batches present (first batch of each higher epoch),
    then collapsed at the log start offset as Kafka's truncateFromStart does."""
    out = []
    for base, _last, epoch, _v in batches:
        if epoch >= 0 and (not out or epoch > out[-1][0]):
            out.append((epoch, base))
    before = [e for e in out if e[1] <= start]
    if before:
        out = [(before[-1][0], start)] + [e for e in out if e[1] > start]
    return out


def model_end_offset(entries, epoch, leo):
    if epoch == -1:
        return (-1, -1)
    if entries and entries[-1][0] == epoch:
        return (epoch, leo)
    higher = [e for e in entries if e[0] > epoch]
    if not higher:
        return (-1, -1)
    lower = [e for e in entries if e[0] <= epoch]
    return ((lower[-1][0] if lower else epoch), higher[0][1])


class LogMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tmp = tempfile.mkdtemp()
        self.dir = self.tmp + "/m-0"
        self.log = KafkaLog.open(self.dir, CFG)
        self.batches = []  # (base, last, epoch, values) physically present, in order
        self.history = []  # the same, including batches deleted by retention (the epoch cache remembers them)
        self.start = 0
        self.end = 0
        self.epoch = 0
        self.counter = 0

    def teardown(self):
        try:
            self.log.close_uncleanly()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _values(self, n):
        self.counter += 1
        return [b"%d-%d" % (self.counter, i) * (1 + self.counter % 5) for i in range(n)]

    @rule(n=st.integers(1, 6), bump=st.booleans())
    def append_leader(self, n, bump):
        self.epoch += bump
        vals = self._values(n)
        info = self.log.append_as_leader(build_batch([(None, v) for v in vals], base_offset=12345), self.epoch)
        assert (info.first_offset, info.last_offset) == (self.end, self.end + n - 1)
        self.batches.append((self.end, self.end + n - 1, self.epoch, vals))
        self.history.append(self.batches[-1])
        self.end += n

    @rule(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3), bump=st.booleans())
    def append_follower(self, sizes, bump):
        self.epoch += bump
        buf = b""
        base = self.end
        new = []
        for n in sizes:
            vals = self._values(n)
            buf += build_batch([(None, v) for v in vals], base_offset=base, partition_leader_epoch=self.epoch)
            new.append((base, base + n - 1, self.epoch, vals))
            base += n
        self.log.append_as_follower(buf)
        self.batches += new
        self.history += new
        self.end = base

    @rule(data=st.data())
    def truncate_to(self, data):
        off = data.draw(st.integers(self.start, self.end))
        self.log.truncate_to(off)
        if off < self.end:
            dropped = [b for b in self.batches if b[1] >= off]
            self.batches = [b for b in self.batches if b[1] < off]
            self.history = [b for b in self.history if b[1] < off]
            if dropped:
                self.end = dropped[0][0]  # a straddling batch goes whole
            if self.end <= self.start:  # the log empties at its start (a straddling batch went whole)
                self.batches = []
                self.history = []  # truncateFromEnd(end) forgets the entry at the start too
                self.end = self.start
        assert self.log.log_end_offset == self.end

    @rule(gap=st.integers(0, 50))
    def truncate_fully(self, gap):
        off = self.end + gap
        self.log.truncate_fully_and_start_at(off)
        self.batches = []
        self.history = []
        self.start = self.end = off

    @precondition(lambda self: self.end > self.start)
    @rule(data=st.data())
    def advance_start(self, data):
        off = data.draw(st.integers(self.start, self.end))
        self.log.advance_log_start_offset(off)
        self.start = max(self.start, off)
        self._drop_deleted()

    @rule(data=st.data())
    def delete_old(self, data):
        upper = data.draw(st.integers(self.start, self.end))
        self.log.delete_old_segments(max_offset=upper, retention_bytes=0, retention_ms=-1)
        self._drop_deleted()
        assert self.log.log_start_offset == self.start

    def _drop_deleted(self):
        first = self.log.segments[0].base_offset
        self.batches = [b for b in self.batches if b[0] >= first]
        self.start = max(self.start, first)

    @rule()
    def roll(self):
        self.log.roll()

    @rule(clean=st.booleans())
    def reopen(self, clean):
        if clean:
            self.log.close()
        else:
            self.log.close_uncleanly()
        self.log = KafkaLog.open(self.dir, CFG, log_start_offset=self.start)
        if self.start == self.end:
            # Kafka's load truncates the epoch cache from the log end: an entry that only
            # remembered the epoch in force at an empty log's start (offset == end) goes.
            self.history = []
        assert self.log.load_report.clean_shutdown == clean
        assert self.log.load_report.truncated_bytes == 0

    @invariant()
    def offsets_match(self):
        assert self.log.log_end_offset == self.end
        assert self.log.log_start_offset == self.start

    @invariant()
    def reads_match(self):
        # read everything from the start, in small fetches
        got = []
        off = self.start
        while off < self.end:
            data = self.log.read(off, 200).tobytes()
            h = scan_batches(data).headers
            for row in h:
                got.append((int(row["base_offset"]), int(row["base_offset"] + row["last_offset_delta"]),
                            int(row["partition_leader_epoch"])))
            off = got[-1][1] + 1
        want = [(b, last, e) for b, last, e, _ in self.batches if last >= self.start]
        assert got == want

    @invariant()
    def epochs_match(self):
        entries = model_epochs(self.history, self.start)
        assert self.log.epoch_cache.entries() == entries
        for e in range(-1, self.epoch + 2):
            assert tuple(self.log.end_offset_for_epoch(e)) == model_end_offset(entries, e, self.end)


LogMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
TestLogMachine = LogMachine.TestCase
