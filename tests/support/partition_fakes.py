"""Stand-ins for the managers a PartitionChangeContext reads (cluster, configs, features,
replication, exclusions), for the property tests that compare a bulk path with the
PartitionChangeBuilder (``test_lifecycle_bulk.py``, ``test_alter_partition_bulk.py``): brokers
are active, fenced, shutting (in controlled shutdown) or gone, with their own directories, some
offline; one topic whose partitions a test sets directly."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kraft_node.metadata.controller.replication_control import DirectoryId, PartitionRegistration
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.messages.runtime import Uuid

BROKERS = list(range(6))
TOPIC_ID = Uuid.from_string("FbrrdcfiR-KC2CPSTHaJrg")
OWN_DIR = {b: Uuid((0xD1 << 64) | (100 + b)) for b in BROKERS}
OTHER_DIR = Uuid((0xD2 << 64) | 7)
VERSIONS = ["3.5-IV2", "3.6-IV0", "3.7-IV2", "4.0-IV1", "4.2-IV1"]


def registered_epoch(b: int) -> int:
    return 100 + b


class Parts(dict[int, PartitionRegistration]):
    def get(self, key: int, default: Any = None, *, epoch: int = -1) -> Any:  # type: ignore[override]
        return super().get(key, default)


@dataclass
class Topic:
    name: str
    topic_id: Uuid
    parts: Parts = field(default_factory=Parts)


@dataclass
class Registration:
    id: int
    epoch: int
    fenced: bool
    in_controlled_shutdown: bool


@dataclass
class Broker:
    state: str  # active, fenced, shutting, gone
    dirs: tuple[Uuid, ...]  # registered directories (empty: all online)
    offline: frozenset[Uuid] = frozenset()


class Cluster:
    def __init__(self, brokers: dict[int, Broker]):
        self.brokers = brokers

    def registration(self, b: int) -> Registration | None:
        br = self.brokers.get(b)
        if br is None or br.state == "gone":
            return None
        return Registration(b, registered_epoch(b), br.state == "fenced", br.state == "shutting")

    def is_active(self, b: int) -> bool:
        br = self.brokers.get(b)
        return br is not None and br.state == "active"

    def has_online_dir(self, b: int, d: Uuid) -> bool:
        br = self.brokers.get(b)
        if br is None or br.state == "gone":
            return False
        if d == DirectoryId.UNASSIGNED or d == DirectoryId.MIGRATING:
            return True
        if d == DirectoryId.LOST or d in br.offline:
            return False
        return not br.dirs or d in br.dirs

    def default_dir(self, b: int) -> Uuid:
        br = self.brokers.get(b)
        if br is None or not br.dirs:
            return DirectoryId.MIGRATING if br is not None else DirectoryId.UNASSIGNED
        return br.dirs[0] if len(br.dirs) == 1 else DirectoryId.UNASSIGNED


class Exclusions:
    def __init__(self, whole: set[int], dirs: dict[int, Uuid]):
        self.whole, self.dirs = whole, dirs

    def excluded(self, b: int, d: Uuid | None) -> bool:
        return b in self.whole or (d is not None and self.dirs.get(b) == d)


class Configs:
    def __init__(self, min_isr: int, unclean: bool):
        self._min_isr, self._unclean = min_isr, unclean

    def min_isr(self, topic_name: str, *, epoch: int = -1) -> int:
        return self._min_isr

    def unclean_leader_election_enabled(self, topic_name: str, *, epoch: int = -1) -> bool:
        return self._unclean


class Features:
    def __init__(self, mv: MetadataVersion, elr: bool):
        self.mv, self.elr = mv, elr

    def metadata_version(self, *, epoch: int = -1) -> MetadataVersion:
        return self.mv

    def is_elr_enabled(self, *, epoch: int = -1) -> bool:
        return self.elr


class Replication:
    max_elections_per_imbalance = 1000

    def __init__(self, elr: bool, topic: Topic | None = None):
        self._elr = elr
        self._topic = topic

    def is_elr_enabled(self) -> bool:
        return self._elr

    def topic(self, topic_id: Uuid) -> Topic | None:
        return self._topic if self._topic is not None and topic_id == self._topic.topic_id else None
