"""``LogConfig``: the per-log settings, under Kafka's topic-config names.

Kafka key               attribute              default (Kafka's)
----------------------  ---------------------  ------------------------------
segment.bytes           segment_bytes          1 GiB
segment.ms              segment_ms             7 days
segment.jitter.ms       segment_jitter_ms      0
segment.index.bytes     segment_index_bytes    10 MiB
index.interval.bytes    index_interval_bytes   4096
retention.bytes         retention_bytes        -1 (unlimited)
retention.ms            retention_ms           7 days (-1 = unlimited)
flush.messages          flush_messages         2^63-1 (never; 1 = fsync every append)
flush.ms                flush_ms               2^63-1 (never)

``verify_crc`` (kraft's own, default True): check every appended batch's
CRC-32C as Kafka's LogValidator does; turn off only for trusted input.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LONG_MAX = 2**63 - 1

_KEYS = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "segment.index.bytes": "segment_index_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "retention.bytes": "retention_bytes",
    "retention.ms": "retention_ms",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
}


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 << 20
    index_interval_bytes: int = 4096
    retention_bytes: int = -1
    retention_ms: int = 7 * 24 * 3600 * 1000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    verify_crc: bool = True
    #: Not a Kafka setting.  -1 (default, Kafka's behaviour): written data stays in the
    #: OS page cache until the kernel evicts it.  N >= 0: once data is flushed, the page
    #: cache of everything but the last N flushed bytes is dropped
    #: (``posix_fadvise(DONTNEED)``).  Why: a log whose readers are served from memory
    #: (the Raft metadata log: the leader answers Fetches from its recent batches,
    #: listeners get the records handed over) gains little from caching gigabytes it
    #: already wrote, and on VMs that return freed guest memory to the host (virtio
    #: free page reporting, as on the machines here) every never-reused page-cache page
    #: costs a host page fault: appends ran ~10x slower than into reused pages
    #: (BENCHMARKS.md, session 7).  Dropping behind the writer makes the kernel reuse
    #: the same pages.
    page_cache_retain_bytes: int = -1

    def __post_init__(self) -> None:
        if self.segment_bytes < 14:
            raise ValueError("segment.bytes must be >= 14")
        if self.segment_index_bytes < 8:
            raise ValueError("segment.index.bytes must be >= 8 (one index entry)")
        if self.index_interval_bytes < 0:
            raise ValueError("index.interval.bytes must be >= 0")
        if self.flush_messages < 1 or self.flush_ms < 0:
            raise ValueError("flush.messages must be >= 1 and flush.ms >= 0")
        if self.page_cache_retain_bytes < -1:
            raise ValueError("page_cache_retain_bytes must be -1 (keep everything) or >= 0")

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> "LogConfig":
        """Build from Kafka key names (``{"segment.bytes": 1048576, ...}``)."""
        kw: dict[str, Any] = {}
        for k, v in props.items():
            if k not in _KEYS:
                raise ValueError(f"unknown log config key {k!r}; known: {', '.join(sorted(_KEYS))}")
            kw[_KEYS[k]] = int(v)
        return cls(**kw)

    def to_properties(self) -> dict[str, int]:
        return {k: getattr(self, a) for k, a in _KEYS.items()}

    def replace(self, **kw: Any) -> "LogConfig":
        return dataclasses.replace(self, **kw)

    @property
    def fsync_every_append(self) -> bool:
        return self.flush_messages == 1
