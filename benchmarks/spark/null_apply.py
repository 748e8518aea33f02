"""A stand-in for the image-apply stage: counts records per type (shows the hook's contract).

    python benchmarks/spark/replay_report.py --apply null_apply:make_applier ...

The MetadataImage issue replaces it with a real applier: ``make_applier()``
returns an object whose ``apply(batch)`` takes each ``pyarrow.RecordBatch``
of the replay columns (offset, timestamp, partition_leader_epoch,
record_type, record_version, value) in log order, and ``finish()`` is called
once at the end (both are inside the timed region).
"""
from __future__ import annotations

import numpy as np


class CountingApplier:
    def __init__(self):
        self.counts = np.zeros(1 << 15, np.int64)
        self.records = 0

    def apply(self, batch) -> None:
        t = batch.column("record_type").fill_null(0).to_numpy()
        self.counts += np.bincount(t, minlength=len(self.counts))[: len(self.counts)]
        self.records += batch.num_rows

    def finish(self) -> dict:
        return {int(k): int(c) for k, c in enumerate(self.counts) if c}


def make_applier() -> CountingApplier:
    return CountingApplier()
