"""Kafka record batch v2: scanning, columnar decoding, building, compression.

The public API of the codec; see the submodules for the details:

* :mod:`.batch` -- ``scan_batches`` (columnar batch index, CRC-checked),
  ``iter_batches`` and the lazy ``RecordBatch`` view, ``BATCH_DTYPE``.
* :mod:`.columns` -- ``decode_records`` / ``decode_record_columns`` into
  ``RecordColumns`` (no Python object per record), ``Record``.
* :mod:`.builder` -- ``build_batch`` (convenience) and ``build_batches`` (bulk).
* :mod:`.compression` -- none, gzip, zstd; lz4 and snappy when installed.
"""
from kraft_storage.record.batch import (
    BATCH_DTYPE,
    CRC_REPORT,
    CRC_SKIP,
    CRC_VERIFY,
    BatchScan,
    RecordBatch,
    iter_batches,
    scan_batches,
)
from kraft_storage.record.builder import build_batch, build_batches, pack_buffers
from kraft_storage.record.columns import Record, RecordColumns, decode_record_columns, decode_records
from kraft_storage.record.constants import HEADER_SIZE, LOG_OVERHEAD, Compression, TimestampType, make_attributes

__all__ = [
    "BATCH_DTYPE", "CRC_REPORT", "CRC_SKIP", "CRC_VERIFY", "BatchScan", "RecordBatch",
    "iter_batches", "scan_batches", "build_batch", "build_batches", "pack_buffers", "Record",
    "RecordColumns", "decode_record_columns", "decode_records", "HEADER_SIZE", "LOG_OVERHEAD",
    "Compression", "TimestampType", "make_attributes",
]
