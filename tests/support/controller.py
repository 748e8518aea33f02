"""Requests a test broker sends to a controller (one place for their shape), and the scripted
Raft client the controller tests run a QuorumController on."""
from __future__ import annotations

import asyncio
import time
from typing import Any

from kraft_node.metadata.versions import supported_features
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest
from kraft_node.protocol.generated.broker_registration import BrokerRegistrationRequest
from kraft_node.raft.errors import NotLeaderError
from kraft_node.raft.messages import Batch, LeaderAndEpoch
from kraft_storage.messages.runtime import Uuid


def broker_registration(broker_id: int, cluster_id: str, *, port: int = 9092,
                        rack: str | None = None) -> BrokerRegistrationRequest:
    """A BrokerRegistration of a fresh incarnation supporting every feature this kraft does."""
    R = BrokerRegistrationRequest
    return R(broker_id=broker_id, cluster_id=cluster_id, incarnation_id=Uuid.random(),
             listeners=[R.Listener(name="PLAINTEXT", host="127.0.0.1", port=port, security_protocol=0)],
             features=[R.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                       for n, (lo, hi) in sorted(supported_features().items())],
             rack=rack, log_dirs=[Uuid.random()])


def broker_heartbeat(broker_id: int, epoch: int, offset: int) -> BrokerHeartbeatRequest:
    return BrokerHeartbeatRequest(broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=offset,
                                  want_fence=False, want_shut_down=False)


async def until_controller_active(node, timeout: float = 15.0) -> None:
    """Until the node's controller has claimed and its bootstrap records are committed."""
    ctl = node.controller.controller
    deadline = time.monotonic() + timeout
    while not (ctl.active and ctl.feature_control.metadata_version_or_none(epoch=ctl.last_stable_offset)):
        assert time.monotonic() < deadline, "the controller did not become active"
        await asyncio.sleep(0.02)


class ScriptedRaft:
    """A Raft client whose commits the test releases by hand, for a QuorumController on node 1.

    ``elect(leader, epoch)`` announces a leader; node 1 may append only as the leader of the
    current epoch (else NotLeaderError, as the real client).  Appends land in ``log``
    ((offset, epoch, value)) and ``batches`` ((base, count, atomic)); ``commit(upto)`` delivers
    every whole append below ``upto`` (default: all) as one committed batch, in order.
    ``truncate_on_lost_leadership``: another node's leadership drops what was not committed (its
    log did not have it), which is what a failover test wants; otherwise the appends stay."""

    def __init__(self, *, truncate_on_lost_leadership: bool = False) -> None:
        self.listener: Any = None
        self.leader = LeaderAndEpoch(-1, 0)
        self.log: list[tuple[int, int, bytes]] = []
        self.batches: list[tuple[int, int, bool]] = []
        self.end = 0
        self.delivered = 0
        self.resigned: list[int] = []
        self.truncate_on_lost_leadership = truncate_on_lost_leadership

    def register_listener(self, listener: Any) -> None:
        self.listener = listener

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return self.leader

    def next_offset(self, epoch: int) -> int:
        if self.leader.leader_id != 1 or self.leader.epoch != epoch:
            raise NotLeaderError(f"not the leader of epoch {epoch}")
        return self.end

    def schedule_append(self, records: Any, epoch: int, atomic: bool) -> int:
        base = self.next_offset(epoch)
        self.log.extend((base + i, epoch, v) for i, v in enumerate(records))
        self.batches.append((base, len(records), atomic))
        self.end = base + len(records)
        return self.end - 1

    def resign(self, epoch: int) -> None:
        self.resigned.append(epoch)

    def create_snapshot(self, snapshot_id: Any) -> None:
        return None

    def elect(self, leader: int, epoch: int) -> None:
        self.leader = LeaderAndEpoch(leader, epoch)
        if leader != 1 and self.truncate_on_lost_leadership:
            self.batches = [b for b in self.batches if b[0] < self.delivered]
            self.log = [e for e in self.log if e[0] < self.delivered]
            self.end = self.delivered
        self.listener.handle_leader_change(self.leader)

    def values(self, base: int, count: int) -> tuple[bytes, ...]:
        """The values appended at ``base``..``base + count - 1``."""
        return tuple(v for off, _e, v in self.log if base <= off < base + count)

    def commit(self, upto: int | None = None) -> None:
        """Deliver the appends wholly below ``upto`` (exclusive; default: all) not yet delivered,
        each as one batch of the epoch it was appended in."""
        upto = self.end if upto is None else upto
        epochs = {off: e for off, e, _v in self.log}
        for base, n, _atomic in list(self.batches):
            if base >= self.delivered and base + n <= upto:
                self.listener.handle_commit((Batch(base, epochs[base], self.values(base, n)),))
                self.delivered = base + n
