"""The cluster's membership in the metadata image (Kafka's ``ClusterImage`` / ``ClusterDelta``).

Why: a broker (and the controller's publishers) needs every registered broker and controller
-- their listeners, racks, fencing, controlled shutdown, log directories -- to route requests
and place replicas.  The registrations are the controller's own immutable values
(:class:`~kraft_node.metadata.controller.cluster_control.BrokerRegistration` /
``ControllerRegistration``), so the controller and the image agree on what a record means.

Structural sharing: both maps are ``immutables.Map``; ``apply`` patches only the changed ids, so
a delta touching one broker shares every other registration object -- and an apply with no
effective change returns the image itself.  A broker heartbeat storm replays many
BrokerRegistrationChangeRecords: each costs a map lookup and, only when something changes, one
new registration (``clone_with`` returns the same object when nothing changes).

Replay rules (Kafka's ClusterDelta): a fence, unfence or registration change names a broker and
its epoch, and fails (ReplayError, Kafka's messages) when the broker is not registered or its epoch
differs; an UnregisterBrokerRecord removes the broker whatever it was (no check, as Kafka's image).
A BrokerRegistrationChangeRecord's ``fenced`` is 1 (fence), -1 (unfence) or 0 (no change), its
``in_controlled_shutdown`` 1 (enter) or 0 (no change) -- only a new registration leaves
controlled shutdown -- and an empty ``log_dirs`` means "no change".

Writing (Kafka's order): brokers, then controllers, each by id.  Losses, reported through
``options.handle_loss`` with Kafka's words: the isMigratingZkBroker state below 3.4-IV0, the online
log directories below 3.7-IV2 (once per broker concerned, as Kafka), and any controller registration
below 3.7-IV0 ("controller registration data"; the controllers are then not written).

``is_empty`` is Kafka's: no brokers (controllers alone do not count).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, ClassVar

import immutables

from kraft_node.metadata.controller.cluster_control import BrokerRegistration, ControllerRegistration
from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.image._changes import apply_changes, freeze
from kraft_node.metadata.image.writer import ImageWriter, ImageWriterOptions
from kraft_storage.messages import metadata as m

__all__ = ["ClusterImage", "ClusterDelta"]

#: BrokerRegistrationChangeRecord.Fenced -> the new fenced state (None: unchanged)
_FENCING_CHANGE: Mapping[int, bool | None] = {1: True, 0: None, -1: False}
#: BrokerRegistrationChangeRecord.InControlledShutdown -> the new state (None: unchanged)
_IN_CONTROLLED_SHUTDOWN_CHANGE: Mapping[int, bool | None] = {0: None, 1: True}


class ClusterImage:
    """Registered brokers and controllers by id.  Immutable; equal by value."""

    __slots__ = ("_brokers", "_controllers")

    EMPTY: ClassVar[ClusterImage]

    _brokers: immutables.Map[int, BrokerRegistration]
    _controllers: immutables.Map[int, ControllerRegistration]

    def __init__(self, brokers: Mapping[int, BrokerRegistration] | None = None,
                 controllers: Mapping[int, ControllerRegistration] | None = None) -> None:
        self._brokers = freeze(brokers)
        self._controllers = freeze(controllers)

    @property
    def brokers(self) -> immutables.Map[int, BrokerRegistration]:
        return self._brokers

    @property
    def controllers(self) -> immutables.Map[int, ControllerRegistration]:
        return self._controllers

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self._brokers.get(broker_id)

    def controller(self, controller_id: int) -> ControllerRegistration | None:
        return self._controllers.get(controller_id)

    def contains_broker(self, broker_id: int) -> bool:
        return broker_id in self._brokers

    def broker_epoch(self, broker_id: int) -> int:
        """The broker's registration epoch; -1 when it is not registered."""
        registration = self._brokers.get(broker_id)
        return -1 if registration is None else registration.epoch

    def is_empty(self) -> bool:
        return not self._brokers

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        mv = options.metadata_version
        for broker_id in sorted(self._brokers):
            registration = self._brokers[broker_id]
            if registration.is_migrating_zk_broker and not mv.is_migration_supported():
                options.handle_loss("the isMigratingZkBroker state of one or more brokers")
            if registration.directories and not mv.is_directory_assignment_supported():
                options.handle_loss("the online log directories of one or more brokers")
            writer.write(registration.to_record(mv))
        if self._controllers:
            if not mv.is_controller_registration_supported():
                options.handle_loss("controller registration data")
            else:
                for controller_id in sorted(self._controllers):
                    writer.write(self._controllers[controller_id].to_record())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClusterImage):
            return NotImplemented
        return self._brokers == other._brokers and self._controllers == other._controllers

    def __hash__(self) -> int:
        return hash((self._brokers, self._controllers))

    def __repr__(self) -> str:
        brokers = ", ".join(repr(self._brokers[i]) for i in sorted(self._brokers))
        controllers = ", ".join(repr(self._controllers[i]) for i in sorted(self._controllers))
        return f"ClusterImage(brokers=[{brokers}], controllers=[{controllers}])"


ClusterImage.EMPTY = ClusterImage()


class ClusterDelta:
    """Registration records replayed over ``image``.  ``changed_brokers`` / ``changed_controllers``:
    id -> the new registration, or None for one removed (unregistered, or not re-stated by a snapshot)."""

    __slots__ = ("image", "changed_brokers", "changed_controllers", "_replayers")

    def __init__(self, image: ClusterImage) -> None:
        self.image = image
        self.changed_brokers: dict[int, BrokerRegistration | None] = {}
        self.changed_controllers: dict[int, ControllerRegistration | None] = {}
        self._replayers: dict[int, Callable[[Any], None]] = {
            m.RegisterBrokerRecord.API_KEY: self._replay_register_broker,
            m.UnregisterBrokerRecord.API_KEY: self._replay_unregister_broker,
            m.FenceBrokerRecord.API_KEY: self._replay_fence_broker,
            m.UnfenceBrokerRecord.API_KEY: self._replay_unfence_broker,
            m.BrokerRegistrationChangeRecord.API_KEY: self._replay_registration_change,
            m.RegisterControllerRecord.API_KEY: self._replay_register_controller,
        }

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        """The broker's registration as of this delta (None: not registered)."""
        changed = self.changed_brokers
        if broker_id in changed:
            return changed[broker_id]
        return self.image.broker(broker_id)

    def finish_snapshot(self) -> None:
        """A snapshot re-states every registration: those of the image it did not name are removed."""
        for broker_id in self.image.brokers:
            self.changed_brokers.setdefault(broker_id, None)
        for controller_id in self.image.controllers:
            self.changed_controllers.setdefault(controller_id, None)

    def replay(self, record: Any) -> None:
        """Apply one cluster record; ReplayError for another type or a change the image cannot take."""
        replayer = self._replayers.get(getattr(record, "API_KEY", -1))
        if replayer is None:
            raise ReplayError(f"ClusterDelta cannot replay {type(record).__name__}")
        replayer(record)

    def _replay_register_broker(self, record: Any) -> None:
        registration = BrokerRegistration.from_record(record)
        self.changed_brokers[registration.id] = registration

    def _replay_unregister_broker(self, record: Any) -> None:
        self.changed_brokers[record.broker_id] = None

    def _replay_register_controller(self, record: Any) -> None:
        registration = ControllerRegistration.from_record(record)
        self.changed_controllers[registration.id] = registration

    def _broker_or_raise(self, broker_id: int, epoch: int, action: str) -> BrokerRegistration:
        registration = self.broker(broker_id)
        if registration is None:
            raise ReplayError(f"Tried to {action} broker {broker_id}, but that broker was not registered.")
        if registration.epoch != epoch:
            raise ReplayError(f"Tried to {action} broker {broker_id}, but the given epoch, {epoch}, did not match "
                              f"the current broker epoch, {registration.epoch}")
        return registration

    def _replay_fence_broker(self, record: Any) -> None:
        self._change(self._broker_or_raise(record.id, record.epoch, "fence"), True, None, None)

    def _replay_unfence_broker(self, record: Any) -> None:
        self._change(self._broker_or_raise(record.id, record.epoch, "unfence"), False, None, None)

    def _replay_registration_change(self, record: Any) -> None:
        current = self._broker_or_raise(record.broker_id, record.broker_epoch, "change")
        if record.fenced not in _FENCING_CHANGE:
            raise ReplayError(f"Unable to replay {record!r}: unknown value for fenced field: {record.fenced}")
        if record.in_controlled_shutdown not in _IN_CONTROLLED_SHUTDOWN_CHANGE:
            raise ReplayError(f"Unable to replay {record!r}: unknown value for inControlledShutdown field: "
                              f"{record.in_controlled_shutdown}")
        self._change(current, _FENCING_CHANGE[record.fenced],
                     _IN_CONTROLLED_SHUTDOWN_CHANGE[record.in_controlled_shutdown], record.log_dirs or None)

    def _change(self, current: BrokerRegistration, fenced: bool | None, in_controlled_shutdown: bool | None,
                directories: Any) -> None:
        changed = current.clone_with(fenced, in_controlled_shutdown, directories)
        if changed is not current:
            self.changed_brokers[current.id] = changed

    def apply(self) -> ClusterImage:
        image = self.image
        brokers = apply_changes(image.brokers, self.changed_brokers)
        controllers = apply_changes(image.controllers, self.changed_controllers)
        if brokers is image.brokers and controllers is image.controllers:
            return image
        return ClusterImage(brokers, controllers)

    def __repr__(self) -> str:
        return (f"ClusterDelta(changed_brokers={self.changed_brokers!r}, "
                f"changed_controllers={self.changed_controllers!r})")
