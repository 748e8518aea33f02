"""SCRAM credentials in the metadata image (Kafka's ``ScramImage`` / ``ScramDelta``).

Why: brokers authenticate SCRAM clients against the credentials the controller stored
(UserScramCredentialRecord, KIP-554); the image keeps them by mechanism, then user.

Rules (Kafka's): a UserScramCredentialRecord sets (or replaces) a user's credential for one
mechanism; a RemoveUserScramCredentialRecord removes it (no error for one that is not there, as
Kafka's image); a mechanism whose last user goes disappears.  A mechanism code Kafka does not
define reads as UNKNOWN.  The credential values are the controller's
:class:`~kraft_node.metadata.controller.security_control.ScramCredentialValue` (its repr hides
every field: they are secrets).

Kafka's ``apply`` drops a mechanism as soon as a removal empties it, even when a later change of
the same delta adds a user back (then that user is lost, depending on HashMap order); here a
mechanism is dropped only if it is empty after all its changes.

Writing: one UserScramCredentialRecord (version 0) per credential, by mechanism then user (the
controller's ``snapshot_records`` order).  Below 3.5-IV2 (no SCRAM records) existing credentials
are a loss, in Kafka's words: ``ScramImage({SCRAM_SHA_256:alice, bob},{})``.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import immutables

from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.controller.security_control import ScramCredentialValue, ScramMechanism
from kraft_node.metadata.image._changes import apply_changes, freeze
from kraft_node.metadata.image.writer import ImageWriter, ImageWriterOptions
from kraft_storage.messages.metadata import RemoveUserScramCredentialRecord, UserScramCredentialRecord

__all__ = ["ScramImage", "ScramDelta", "ScramMechanism", "ScramCredentialValue"]

_Users = immutables.Map[str, ScramCredentialValue]
_NO_USERS: _Users = immutables.Map()


class ScramImage:
    """Credentials by mechanism, then user name (never an empty mechanism).  Immutable; equal by value."""

    __slots__ = ("_mechanisms",)

    EMPTY: ClassVar[ScramImage]

    _mechanisms: immutables.Map[ScramMechanism, _Users]

    def __init__(self, mechanisms: Mapping[ScramMechanism, Mapping[str, ScramCredentialValue]] | None = None) -> None:
        frozen = {mech: freeze(users) for mech, users in (mechanisms or {}).items()}
        self._mechanisms = freeze(frozen)

    @property
    def mechanisms(self) -> immutables.Map[ScramMechanism, _Users]:
        return self._mechanisms

    def credential(self, user: str, mechanism: ScramMechanism) -> ScramCredentialValue | None:
        return self._mechanisms.get(mechanism, _NO_USERS).get(user)

    def is_empty(self) -> bool:
        return not self._mechanisms

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        mechanisms = self._mechanisms
        if not options.metadata_version.is_scram_supported():
            lost = [(mech, sorted(mechanisms[mech])) for mech in sorted(mechanisms) if mechanisms[mech]]
            if lost:
                # Kafka's odd bracketing: each mechanism's users end with "},{", and the whole with "})"
                options.handle_loss("ScramImage({" + "".join(f"{mech.name}:{', '.join(users)}" + "},{"
                                                             for mech, users in lost) + "})")
            return
        for mech in sorted(mechanisms):
            users = mechanisms[mech]
            for user in sorted(users):
                value = users[user]
                writer.write(ApiMessageAndVersion(UserScramCredentialRecord(
                    name=user, mechanism=int(mech), salt=value.salt, stored_key=value.stored_key,
                    server_key=value.server_key, iterations=value.iterations), 0))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScramImage):
            return NotImplemented
        return self._mechanisms == other._mechanisms

    def __hash__(self) -> int:
        return hash(self._mechanisms)

    def __repr__(self) -> str:
        parts = ", ".join(f"{mech.name}: {sorted(self._mechanisms[mech])}" for mech in sorted(self._mechanisms))
        return f"ScramImage({{{parts}}})"


ScramImage.EMPTY = ScramImage()


class ScramDelta:
    """SCRAM records replayed over ``image``.  ``changes``: mechanism -> user -> the new credential, or
    None for one removed."""

    __slots__ = ("image", "changes")

    def __init__(self, image: ScramImage) -> None:
        self.image = image
        self.changes: dict[ScramMechanism, dict[str, ScramCredentialValue | None]] = {}

    def finish_snapshot(self) -> None:
        """A snapshot re-states every credential: those of the image it did not name are removed."""
        for mech, users in self.image.mechanisms.items():
            user_changes = self.changes.setdefault(mech, {})
            for user in users:
                user_changes.setdefault(user, None)

    def replay(self, record: Any) -> None:
        """Apply a UserScramCredentialRecord or a RemoveUserScramCredentialRecord; ReplayError otherwise."""
        api_key = getattr(record, "API_KEY", None)
        if api_key == UserScramCredentialRecord.API_KEY:
            value: ScramCredentialValue | None = ScramCredentialValue(
                bytes(record.salt), bytes(record.stored_key), bytes(record.server_key), int(record.iterations))
        elif api_key == RemoveUserScramCredentialRecord.API_KEY:
            value = None
        else:
            raise ReplayError(f"ScramDelta cannot replay {type(record).__name__}")
        self.changes.setdefault(ScramMechanism.from_code(record.mechanism), {})[record.name] = value

    def apply(self) -> ScramImage:
        image = self.image
        updates: dict[ScramMechanism, _Users | None] = {}
        for mech, user_changes in self.changes.items():
            users = apply_changes(image.mechanisms.get(mech, _NO_USERS), user_changes)
            updates[mech] = users if users else None
        mechanisms = apply_changes(image.mechanisms, updates)
        return image if mechanisms is image.mechanisms else ScramImage(mechanisms)

    def __repr__(self) -> str:
        parts = ", ".join(f"{mech.name}: {sorted(users)}" for mech, users in self.changes.items())
        return f"ScramDelta(changed_users={{{parts}}})"
