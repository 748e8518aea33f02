"""LogManager's periodic checkpoints are written off the loop, one at a time: the rows are
taken on the loop, the formatting and the atomic write (fsyncs) run on the checkpoint thread,
and the shutdown's final write waits behind a periodic one still running there."""
from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid

from kraft_node.broker.log_manager import REPLICATION_OFFSET_CHECKPOINT, LogManager
from kraft_node.metadata.image.topics import TopicPartition
from kraft_storage.log.checkpoint import parse_checkpoint


def test_periodic_checkpoints_do_not_hold_the_loop_and_land_in_order(tmp_path, monkeypatch):
    lm = LogManager([str(tmp_path)], broker_props={"replica.high.watermark.checkpoint.interval.ms": "10"})
    lm.startup()
    tps = [TopicPartition("t", p) for p in range(3)]
    for tp in tps:
        lm.get_or_create_log(tp, uuid.uuid4().bytes, {})
    hw = {tp: 0 for tp in tps}
    lm.high_watermark_of = hw.get
    writes: list[tuple[str, str, float]] = []
    real_write = LogManager._write
    slow = threading.Event()

    def slow_write(path, rows):  # type: ignore[no-untyped-def]
        writes.append((threading.current_thread().name, os.path.basename(path), time.monotonic()))
        if slow.is_set():
            time.sleep(0.2)  # a busy disk's fsync
        real_write(path, rows)
    monkeypatch.setattr(LogManager, "_write", staticmethod(slow_write))

    async def main() -> list[float]:
        lm.start_background()
        await asyncio.sleep(0.05)
        slow.set()
        hw[tps[1]] = 7
        gaps = []
        t = time.monotonic()
        for _ in range(40):  # the loop keeps ticking while a checkpoint sleeps in its fsync
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - t)
            t = now
        hw[tps[2]] = 9
        await lm.shutdown()
        return gaps

    gaps = asyncio.run(main())
    assert writes and all(name.startswith("kraft-checkpoint") for name, _f, _t in writes), writes
    assert max(gaps) < 0.15, max(gaps)
    # the shutdown's rows were taken last and written last: the file holds them
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    got = {(t, int(p)): int(off) for t, p, off in parse_checkpoint(path.read_text(), str(path), 3)}
    assert got == {("t", 0): 0, ("t", 1): 7, ("t", 2): 9}
