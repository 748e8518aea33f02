"""``BrokerRegistrationTracker``: re-registers the broker when its registration in the image falls
behind what the cluster's metadata.version needs (Kafka's publisher of the same name).

The one case, as in Kafka: a cluster upgraded across 3.7-IV2 (JBOD, directory assignment)
keeps the registrations its brokers sent before, which list no log directories; each broker
must send its BrokerRegistration again so that the controller learns its directories.  The
tracker compares the registration the image holds for this broker with that need, whenever a
delta changes the metadata.version or this broker's registration, and asks the lifecycle
manager to register again (``BrokerLifecycleManager.resend_broker_registration``).

Re-sending is harmless when it turns out to be spurious (a restarted broker replaying the
upgrade from its log before its new registration is in): the controller answers with a new
epoch and the broker goes on.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.loader.manifest import LoaderManifest
from kraft_node.metadata.loader.publisher import MetadataPublisher
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.raft.messages import LeaderAndEpoch

log = logging.getLogger("kraft.broker.registration")

__all__ = ["BrokerRegistrationTracker"]


class BrokerRegistrationTracker(MetadataPublisher):
    """Calls ``refresh_registration`` when this broker's registration needs re-sending (see the
    module doc).  Installed in the broker's MetadataLoader."""

    def __init__(self, node_id: int, refresh_registration: Callable[[], None]) -> None:
        self.node_id = node_id
        self._refresh = refresh_registration
        self._prefix = f"[BrokerRegistrationTracker id={node_id}] "

    @property
    def name(self) -> str:
        return f"BrokerRegistrationTracker(id={self.node_id})"

    def on_metadata_update(self, delta: MetadataDelta, new_image: MetadataImage, manifest: LoaderManifest) -> None:
        check = False
        features = delta.features_delta
        if features is not None and features.metadata_version_change() is not None:
            check = True
        cluster = delta.cluster_delta
        if cluster is not None and self.node_id in cluster.changed_brokers:
            check = True
        if check and self.needs_refresh(new_image.features.metadata_version(), new_image):
            self._refresh()

    def needs_refresh(self, metadata_version: MetadataVersion | None, image: MetadataImage) -> bool:
        """Whether this broker's registration in ``image`` must be sent again at ``metadata_version``."""
        registration = image.cluster.brokers.get(self.node_id)
        if registration is None:
            # the lifecycle manager is still sending the first one: nothing to refresh yet
            log.debug("%sNo current broker registration to check.", self._prefix)
            return False
        if metadata_version is not None and metadata_version.is_directory_assignment_supported() \
                and not registration.directories:
            log.info("%sCurrent directory set is empty, but MV supports JBOD. Resending broker registration.",
                     self._prefix)
            return True
        log.debug("%sBroker registration does not need to be resent.", self._prefix)
        return False

    def on_controller_change(self, new_leader_and_epoch: LeaderAndEpoch) -> None:
        pass

    def close(self) -> None:
        pass
