"""The record-batch benchmark workload and the competing implementations.

Workload (issue "Foundation"): N records, 16-byte keys, 100-byte values,
1000 records per batch, uncompressed or zstd.  Each contender is a function
``(payload) -> result`` timed by the report script and by pytest-benchmark.

Contenders:
* kraft native (this process's kernels) -- bulk encode, columnar decode with
  CRC checked, and the per-record object iterator;
* kraft pure-Python twin, same operations (importing the twin modules directly);
* aiokafka's Cython codec (``aiokafka.record._crecords``);
* kafka-python's pure-Python codec (``kafka.record``).
"""
from __future__ import annotations

import numpy as np

KEY_SIZE = 16
VALUE_SIZE = 100
PER_BATCH = 1000
CODECS = {"none": 0, "zstd": 4}


class Workload:
    def __init__(self, n: int, seed: int = 1):
        rng = np.random.default_rng(seed)
        self.n = n
        self.keys = rng.integers(0, 256, n * KEY_SIZE, dtype=np.uint8).tobytes()
        # values compressible like metadata (a repeated alphabet with noise)
        base = np.frombuffer((b"abcdefghij" * 10), dtype=np.uint8)
        vals = np.tile(base, n)
        noise = rng.integers(0, 4, n * VALUE_SIZE, dtype=np.uint8)
        self.values = (vals + noise).astype(np.uint8).tobytes()
        self.key_off = np.arange(n + 1, dtype=np.int64) * KEY_SIZE
        self.val_off = np.arange(n + 1, dtype=np.int64) * VALUE_SIZE
        self.ts = 1_700_000_000_000 + np.arange(n, dtype=np.int64)
        self._key_list = None

    @property
    def payload_bytes(self) -> int:
        return self.n * (KEY_SIZE + VALUE_SIZE)

    def key_list(self):
        if self._key_list is None:
            k, v = memoryview(self.keys), memoryview(self.values)
            self._key_list = [(bytes(k[i * KEY_SIZE:(i + 1) * KEY_SIZE]),
                               bytes(v[i * VALUE_SIZE:(i + 1) * VALUE_SIZE])) for i in range(self.n)]
        return self._key_list


# ------------------------------------------------------------------ kraft

def kraft_encode(w: Workload, codec: str, kernels=None):
    from kraft_storage.record import build_batches
    if kernels is None:
        return build_batches((w.values, w.val_off), keys=(w.keys, w.key_off), timestamps=w.ts,
                             records_per_batch=PER_BATCH, compression=codec)
    import kraft_storage.record.builder as b
    saved = b._k
    b._k = kernels
    try:
        return kraft_encode(w, codec)
    finally:
        b._k = saved


def kraft_encode_into(w: Workload, codec: str, out):
    """Bulk encode into a caller's reusable buffer (what a log appender does)."""
    from kraft_storage.record import build_batches
    return build_batches((w.values, w.val_off), keys=(w.keys, w.key_off), timestamps=w.ts,
                         records_per_batch=PER_BATCH, compression=codec, out=out)


def kraft_decode_columns(data: bytes, kernels=None):
    """Scan (CRC-checked) + decode every record into columns."""
    from kraft_storage.record import batch, columns
    if kernels is None:
        return len(columns.decode_records(data))
    saved = batch._k, columns._k
    batch._k = columns._k = kernels
    try:
        return len(columns.decode_records(data))
    finally:
        batch._k, columns._k = saved


def kraft_decode_columns_reused(data: bytes, holder: list):
    """Columnar decode recycling the previous call's arrays (replay segment after segment)."""
    from kraft_storage.record import decode_records
    holder[0] = decode_records(data, reuse=holder[0])
    return len(holder[0])


def kraft_iter_records(data: bytes):
    """Per-record objects, touching key and value of each."""
    from kraft_storage.record import decode_records
    n = 0
    for r in decode_records(data):
        n += len(r.value) + (0 if r.key is None else 1)
    return n


# --------------------------------------------------------------- aiokafka

def aiokafka_encode(w: Workload, codec: str):
    from aiokafka.record._crecords import DefaultRecordBatchBuilder
    out = bytearray()
    kv = w.key_list()
    ts = w.ts.tolist()
    for lo in range(0, w.n, PER_BATCH):
        b = DefaultRecordBatchBuilder(2, CODECS[codec], 0, -1, -1, -1, 1 << 30)
        for i in range(lo, min(lo + PER_BATCH, w.n)):
            k, v = kv[i]
            b.append(i - lo, ts[i], k, v, [])
        out += b.build()
    return bytes(out)


def aiokafka_iter_records(data: bytes):
    from aiokafka.record._crecords import MemoryRecords
    mr = MemoryRecords(data)
    n = 0
    while mr.has_next():
        batch = mr.next_batch()
        if not batch.validate_crc():
            raise ValueError("bad crc")
        for r in batch:
            n += len(r.value) + (0 if r.key is None else 1)
    return n


# ------------------------------------------------------------ kafka-python

def kafka_python_encode(w: Workload, codec: str):
    from kafka.record.default_records import DefaultRecordBatchBuilder
    out = bytearray()
    kv = w.key_list()
    ts = w.ts.tolist()
    for lo in range(0, w.n, PER_BATCH):
        b = DefaultRecordBatchBuilder(magic=2, compression_type=CODECS[codec], is_transactional=0,
                                      producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                      batch_size=1 << 30)
        for i in range(lo, min(lo + PER_BATCH, w.n)):
            k, v = kv[i]
            b.append(i - lo, timestamp=ts[i], key=k, value=v, headers=[])
        out += b.build()
    return bytes(out)


def kafka_python_iter_records(data: bytes):
    from kafka.record.memory_records import MemoryRecords
    mr = MemoryRecords(data)
    n = 0
    while mr.has_next():
        batch = mr.next_batch()
        if not batch.validate_crc():
            raise ValueError("bad crc")
        for r in batch:
            n += len(r.value) + (0 if r.key is None else 1)
    return n
