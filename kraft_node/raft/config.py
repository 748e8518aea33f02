"""Quorum configuration: Kafka's ``controller.quorum.*`` settings and defaults.

Field names are the config keys with the ``controller.quorum.`` prefix dropped
and dots turned into underscores, so ``from_properties`` is a direct mapping.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

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
        kwargs = {}
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
            kwargs[name] = int(value)
        return cls(**kwargs)
