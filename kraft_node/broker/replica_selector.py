"""Fetch from the closest replica (KIP-392): ``replica.selector.class`` and the leader's choice
of a ``preferred_read_replica`` for a consumer.

Why: a consumer in another rack (availability zone) than the leader pays cross-zone traffic
for every byte it reads; with ``client.rack`` (Fetch v11+ ``rack_id``) and a selector configured
on the brokers, the leader answers such a consumer with the id of an in-sync replica in its
rack instead of records, and the consumer fetches from that follower, which serves consumers
up to its own high watermark (partition_apis.py).

Settings: ``replica.selector.class`` unset or empty (Kafka's default) selects nothing: every
consumer reads from the leader.  The one implementation kraft has is Kafka's
``org.apache.kafka.common.replica.RackAwareReplicaSelector`` (its simple name is accepted
too); any other class name is refused when the config is read, by name, rather than silently
reading from the leader.

Kafka's rules (``ReplicaManager.findPreferredReadReplica`` and ``RackAwareReplicaSelector``):

* only the leader chooses, only for Fetch v11+ from a consumer (never for a follower's fetch);
* candidates: the leader, and each follower in the ISR whose last fetch showed a log end at or
  past the fetch offset and a log start at or before it; each with its endpoint on the
  listener the request came in on (unfenced brokers with that listener only);
* a client without a rack gets the leader; otherwise the leader when it is in the client's rack
  or no candidate is; else the same-rack candidate with the largest log end offset, ties broken
  by the most recent catch-up;
* the leader chosen means "no preferred replica" (-1): the leader reads as usual.  A chosen
  replica makes the answer carry no records, only the offsets and ``preferred_read_replica``,
  and it is sent at once (no wait in the fetch purgatory).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["RACK_AWARE_REPLICA_SELECTOR", "REPLICA_SELECTOR_CLASS", "RackAwareReplicaSelector", "ReplicaView",
           "ReplicaSelectorConfigError", "replica_selector_from_properties"]

REPLICA_SELECTOR_CLASS = "replica.selector.class"
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
_KNOWN = {RACK_AWARE_REPLICA_SELECTOR, "RackAwareReplicaSelector"}


class ReplicaSelectorConfigError(ValueError):
    """``replica.selector.class`` names a class kraft does not have."""


@dataclass(frozen=True)
class ReplicaView:
    """A candidate replica as the selector sees it (Kafka's ``ReplicaView``)."""
    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int


class RackAwareReplicaSelector:
    """Kafka's ``RackAwareReplicaSelector`` (see the module doc)."""

    name = RACK_AWARE_REPLICA_SELECTOR

    def select(self, client_rack: str | None, replicas: Iterable[ReplicaView], leader: ReplicaView) -> ReplicaView:
        """The replica ``client_rack`` should read from (``leader`` when none is better)."""
        if not client_rack:
            return leader
        same_rack = [r for r in replicas if r.rack == client_rack]
        if not same_rack or any(r.broker_id == leader.broker_id for r in same_rack):
            return leader
        # most caught up: the largest log end, then the shortest time since it caught up
        return max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_last_caught_up_ms))


def replica_selector_from_properties(props: Mapping[str, str],
                                     source: str = "config") -> RackAwareReplicaSelector | None:
    """The selector ``replica.selector.class`` names (None: unset, Kafka's default); raises
    :class:`ReplicaSelectorConfigError` naming the key and the class for any other class."""
    raw = props.get(REPLICA_SELECTOR_CLASS)
    if raw is None or not raw.strip():
        return None
    name = raw.strip()
    if name not in _KNOWN:
        raise ReplicaSelectorConfigError(
            f"{source}: {REPLICA_SELECTOR_CLASS}={name!r} is not supported: kraft has "
            f"{RACK_AWARE_REPLICA_SELECTOR} only (or leave it unset to read from leaders only)")
    return RackAwareReplicaSelector()
