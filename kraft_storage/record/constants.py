"""Constants of Kafka's record batch v2 format (see ``csrc/recordbatch.h`` for the layout)."""
from __future__ import annotations

import enum

LOG_OVERHEAD = 12          # baseOffset int64 + batchLength int32
HEADER_SIZE = 61           # the whole v2 batch header, records start here
CRC_OFFSET = 17            # the CRC covers bytes [21, size)
ATTRIBUTES_OFFSET = 21
MAGIC = 2

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40


class Compression(enum.IntEnum):
    """Codec ids in attribute bits 0-2 (Kafka's CompressionType)."""
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, value: "Compression | str | int") -> "Compression":
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                raise ValueError(f"unknown compression {value!r} (none, gzip, snappy, lz4, zstd)") from None
        return cls(value)


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


def make_attributes(compression: int = 0, timestamp_type: int = 0, transactional: bool = False,
                    control: bool = False, delete_horizon: bool = False) -> int:
    """The batch attributes int16 from its parts."""
    return (int(compression) & COMPRESSION_MASK) | (TIMESTAMP_TYPE_MASK if timestamp_type else 0) | (
        TRANSACTIONAL_MASK if transactional else 0) | (CONTROL_MASK if control else 0) | (
        DELETE_HORIZON_MASK if delete_horizon else 0)
