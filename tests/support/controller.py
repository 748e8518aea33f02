"""Requests a test broker sends to a controller (one place for their shape)."""
from __future__ import annotations

import asyncio
import time

from kraft_node.metadata.versions import supported_features
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest
from kraft_node.protocol.generated.broker_registration import BrokerRegistrationRequest
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
