"""ACLs in the metadata image (Kafka's ``AclsImage`` / ``AclsDelta``).

Why: every broker's authorizer (Kafka's StandardAuthorizer) loads its ACLs from the image, and
the authorizer publisher needs the delta's changes (id -> ACL added, or removed) to update its
cache without reloading everything.

Rules (Kafka's): an AccessControlEntryRecord adds (or replaces) the ACL with its id; a
RemoveAccessControlEntryRecord removes one the image has, or cancels one added earlier in the
same delta (then no change is recorded at all), and is a ReplayError for an id known to neither
("Failed to find existing ACL with ID <id> in either image or changes").  ACLs are the
controller's :class:`~kraft_node.metadata.controller.security_control.StandardAcl` values (an
operation or type code Kafka does not define reads as UNKNOWN, as Kafka's ``fromCode``).

Writing: one AccessControlEntryRecord (version 0) per ACL, by id bytes -- the controller's
``snapshot_records`` order.  Kafka writes ACLs at every metadata.version (it cannot tell 3.2-IV0,
where they appeared, from 3.0-IV1), so there is no loss here.  Structural sharing: the id map is
an ``immutables.Map`` patched per changed id.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import immutables

from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.controller.security_control import StandardAcl
from kraft_node.metadata.image._changes import apply_changes, freeze
from kraft_node.metadata.image.writer import ImageWriter, ImageWriterOptions
from kraft_storage.messages.metadata import AccessControlEntryRecord, RemoveAccessControlEntryRecord
from kraft_storage.messages.runtime import Uuid

__all__ = ["AclsImage", "AclsDelta", "StandardAcl"]


class AclsImage:
    """Every ACL by its id.  Immutable; equal by value."""

    __slots__ = ("_acls",)

    EMPTY: ClassVar[AclsImage]

    _acls: immutables.Map[Uuid, StandardAcl]

    def __init__(self, acls: Mapping[Uuid, StandardAcl] | None = None) -> None:
        self._acls = freeze(acls)

    @property
    def acls(self) -> immutables.Map[Uuid, StandardAcl]:
        return self._acls

    def is_empty(self) -> bool:
        return not self._acls

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        for acl_id in sorted(self._acls, key=_id_order):
            writer.write(ApiMessageAndVersion(self._acls[acl_id].to_record(acl_id), 0))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AclsImage):
            return NotImplemented
        return self._acls == other._acls

    def __hash__(self) -> int:
        return hash(self._acls)

    def __repr__(self) -> str:
        return f"AclsImage({{{', '.join(f'{i}: {self._acls[i]}' for i in sorted(self._acls, key=_id_order))}}})"


AclsImage.EMPTY = AclsImage()


def _id_order(acl_id: Uuid) -> bytes:
    return bytes(acl_id.bytes)


class AclsDelta:
    """ACL records replayed over ``image``.  ``changes``: id -> the ACL added, or None for one removed,
    in replay order (the authorizer applies them in that order)."""

    __slots__ = ("image", "changes")

    def __init__(self, image: AclsImage) -> None:
        self.image = image
        self.changes: dict[Uuid, StandardAcl | None] = {}

    def finish_snapshot(self) -> None:
        """A snapshot re-states every ACL: those of the image it did not name are removed."""
        for acl_id in self.image.acls:
            self.changes.setdefault(acl_id, None)

    def replay(self, record: Any) -> None:
        """Apply an AccessControlEntryRecord or a RemoveAccessControlEntryRecord; ReplayError otherwise."""
        api_key = getattr(record, "API_KEY", None)
        if api_key == AccessControlEntryRecord.API_KEY:
            self.changes[record.id] = StandardAcl.from_record(record)
        elif api_key == RemoveAccessControlEntryRecord.API_KEY:
            acl_id = record.id
            if acl_id in self.image.acls:
                self.changes[acl_id] = None
            elif acl_id in self.changes:
                del self.changes[acl_id]  # added and removed within this delta: nothing to track
            else:
                raise ReplayError(f"Failed to find existing ACL with ID {acl_id} in either image or changes")
        else:
            raise ReplayError(f"AclsDelta cannot replay {type(record).__name__}")

    def apply(self) -> AclsImage:
        acls = apply_changes(self.image.acls, self.changes)
        return self.image if acls is self.image.acls else AclsImage(acls)

    def __repr__(self) -> str:
        return f"AclsDelta(changes={{{', '.join(f'{i}: {a}' for i, a in self.changes.items())}}})"
