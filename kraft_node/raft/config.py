"""Quorum configuration: Kafka's ``controller.quorum.*`` settings and defaults.

Field names are the config keys with the ``controller.quorum.`` prefix dropped
and dots turned into underscores, so ``from_properties`` is a direct mapping.
Kafka's keys: voters, bootstrap.servers, election.timeout.ms, election.backoff.max.ms,
fetch.timeout.ms, request.timeout.ms, retry.backoff.ms, append.linger.ms and
auto.join.enable.  kraft's own tuning keys under the same prefix (not Kafka's; Kafka
hard-codes these): fetch.max.bytes, fetch.snapshot.max.bytes, fetch.max.wait.ms,
max.batch.size.bytes, max.number.of.batches.  Any other ``controller.quorum.*`` key is
refused (a typo would otherwise silently leave a default in place), and every value is
range-checked with the key named in the error.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

PREFIX = "controller.quorum."


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    #: Base election timeout; the effective timeout is uniform in [t, 2t).
    election_timeout_ms: int = 1000
    #: Cap of the exponential election backoff.
    election_backoff_max_ms: int = 1000
    #: Follower: time without a successful fetch before pre-voting.  Leader:
    #: check-quorum resigns after 1.5x this without fetches from a majority.
    fetch_timeout_ms: int = 2000
    #: An outstanding request older than this is considered failed.
    request_timeout_ms: int = 2000
    #: Wait after a failed request before sending to the same node again.
    retry_backoff_ms: int = 20
    #: How long the leader lets appends accumulate before writing a batch.
    append_linger_ms: int = 25
    #: Maximum bytes returned by one Fetch (at least one batch is always returned).
    #: Kafka: 8 MiB (KafkaRaftClient.MAX_FETCH_SIZE_BYTES, not configurable there).
    #: Was 1 MiB here until session 5; the larger answer lets a loaded follower write
    #: and fsync everything the leader appended during its last round trip at once.
    fetch_max_bytes: int = 8 * 1024 * 1024
    #: Maximum bytes returned by one FetchSnapshot.
    fetch_snapshot_max_bytes: int = 1048576
    #: How long the leader parks an empty Fetch before answering it (Kafka's
    #: replica fetch max wait; not a controller.quorum key).
    fetch_max_wait_ms: int = 500
    #: Maximum size of one accumulated batch (Kafka: 8 MiB).
    max_batch_size_bytes: int = 8 * 1024 * 1024
    #: Maximum number of batches queued in the accumulator before appends
    #: are refused with BufferFullError (Kafka: 10).
    max_number_of_batches: int = 10
    #: ``controller.quorum.auto.join.enable``: an observer asks the leader to add it as a voter.
    auto_join_enable: bool = False

    def __post_init__(self) -> None:
        # Kafka's ConfigDef: INT, atLeast(0).  Stricter here where 0 is a test setting or
        # cannot work (Kafka reads a zero election timeout as "stand at once"; zero
        # fetch/request timeouts expire at once; a zero byte or batch cap sends nothing).
        for name, low in _MINIMUM.items():
            v = getattr(self, name)
            if type(v) is not int or not low <= v <= _INT_MAX:
                raise ValueError(f"{PREFIX}{name.replace('_', '.')}={v!r} is out of range: "
                                 f"it must be an integer from {low} to {_INT_MAX}")

    @property
    def check_quorum_timeout_ms(self) -> int:
        return int(self.fetch_timeout_ms * 1.5)

    @property
    def begin_quorum_epoch_timeout_ms(self) -> int:
        return self.fetch_timeout_ms // 2

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> "QuorumConfig":
        """Build from Kafka-style properties; unknown ``controller.quorum.*`` keys are rejected."""
        names = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {}  # field -> int, or bool for auto_join_enable
        for key, value in props.items():
            if not key.startswith(PREFIX):
                continue
            name = key[len(PREFIX):].replace(".", "_")
            if name == "auto_join_enable":
                v = value.strip().lower()
                if v not in ("true", "false"):
                    raise ValueError(f"{key} must be true or false, got {value!r}")
                kwargs[name] = v == "true"
                continue
            if name in ("voters", "bootstrap_servers"):
                continue  # membership settings are not part of the core's timing config
            if name not in names:
                raise ValueError(f"unknown quorum config {key!r}")
            try:
                kwargs[name] = int(value.strip())
            except ValueError:
                raise ValueError(f"{key}={value!r} is not an integer") from None
        return cls(**kwargs)


_INT_MAX = 2 ** 31 - 1  # Kafka's INT configs
#: field -> smallest value accepted (see QuorumConfig.__post_init__)
_MINIMUM = {"election_timeout_ms": 1, "election_backoff_max_ms": 0, "fetch_timeout_ms": 1,
            "request_timeout_ms": 1, "retry_backoff_ms": 0, "append_linger_ms": 0, "fetch_max_bytes": 1,
            "fetch_snapshot_max_bytes": 1, "fetch_max_wait_ms": 0, "max_batch_size_bytes": 1,
            "max_number_of_batches": 1}
