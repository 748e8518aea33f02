"""What the loader publishes to (Kafka's ``MetadataPublisher``).

Why an interface: every subsystem that follows the metadata (the broker's metadata cache,
dynamic configs, the snapshot generator, quotas, ACLs...) gets the same three things --
the delta since the image it saw last, the new image, and a manifest saying whether that
was a log tail or a snapshot -- and never reads the log itself.

Contract (what the loader guarantees, :mod:`kraft_node.metadata.loader.loader`):

* calls come from the loader's thread only (the Raft driver's event loop in kraft), one at a
  time, in offset order; a publisher installed before another gets each update first;
* the first call a publisher gets is a full "snapshot" of the current image (a delta from the
  empty image that states everything), then ``on_controller_change``; later calls are deltas;
* a publisher must not change what it is given (images and deltas are shared with the other
  publishers) and should not block: the next image waits for it.

A class that subclasses :class:`MetadataPublisher` inherits no-op ``on_controller_change`` and
``close``; a class that only matches the protocol must define all four members.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.loader.manifest import LoaderManifest
from kraft_node.raft.messages import LeaderAndEpoch

__all__ = ["MetadataPublisher"]


@runtime_checkable
class MetadataPublisher(Protocol):
    @property
    def name(self) -> str:
        """Unique among the publishers of one loader (installing a second one of the same name fails)."""
        ...

    def on_metadata_update(self, delta: MetadataDelta, new_image: MetadataImage, manifest: LoaderManifest) -> None:
        """A new image: ``delta`` is what changed since the previous one this publisher saw
        (``delta.image``), ``manifest`` is a LogDeltaManifest or a SnapshotManifest."""
        ...

    def on_controller_change(self, new_leader_and_epoch: LeaderAndEpoch) -> None:
        """The quorum's leader changed (``leader_id`` -1: none known now)."""
        return None

    def close(self) -> None:
        """The loader is closing, or this publisher was removed: free what it holds."""
        return None
