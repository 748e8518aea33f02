"""Replay-side state of Kafka's security and quota managers: ACLs, SCRAM credentials,
delegation tokens, client quotas -- one class per Kafka manager.

Why now, before their RPCs: a Kafka-written log may hold any of these records, and a record
type the controller cannot apply is fatal, so each gets its state and replay here; the write
side (CreateAcls, AlterUserScramCredentials, CreateDelegationToken, AlterClientQuotas) comes
later and reads this state.

Each class keeps a timeline map keyed as Kafka keys it, so reads work at any registry epoch
and a revert undoes uncommitted records:

* :class:`AclControlManager`: ACL id -> :class:`StandardAcl`, plus the set of ACLs (the
  write side refuses to create an ACL twice);
* :class:`ScramControlManager`: ``(user name, mechanism)`` -> credential;
* :class:`DelegationTokenControlManager`: token id -> token (Kafka's controller keeps these in
  the broker-side token cache it shares; here they are controller state like the rest);
* :class:`ClientQuotaControlManager`: entity -> (quota key -> value).

Codes a Kafka release does not define (an ACL operation, a SCRAM mechanism) map to UNKNOWN
as Kafka's ``fromCode`` does, so two records Kafka treats as one ACL are one ACL here too.

``snapshot_records(epoch)`` writes version 0 records (the only versions these types have),
sorted for deterministic bytes; SCRAM credentials need metadata.version 3.5-IV2 and
delegation tokens 3.6-IV2, below which state that exists cannot be written
(:class:`~kraft_node.metadata.controller.replication_control.UnwritableMetadataError`,
with Kafka's wording of what is lost).
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.replication_control import (
    MetadataVersionAt,
    UnwritableMetadataError,
    as_metadata_version,
)
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid
from kraft_storage.timeline import LATEST_EPOCH, TimelineHashMap, TimelineHashSet

log = logging.getLogger("kraft.controller.security")


def _mv_of(provider: MetadataVersionAt | None, epoch: int,
           metadata_version: MetadataVersion | None) -> MetadataVersion | None:
    """The argument if given, else the provider's answer for ``epoch`` (None: the newest)."""
    if metadata_version is None and provider is not None:
        return as_metadata_version(provider(epoch))
    return metadata_version


class _CodeEnum(enum.IntEnum):
    """A Kafka enum carried as a byte: an undefined code is UNKNOWN, never an error."""

    @classmethod
    def from_code(cls, code: int) -> Any:
        try:
            return cls(code)
        except ValueError:
            return cls(0)


# ---------------------------------------------------------------------------
# ACLs
# ---------------------------------------------------------------------------

class ResourceType(_CodeEnum):
    """What an ACL protects (Kafka's org.apache.kafka.common.resource.ResourceType)."""
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_CodeEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_CodeEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(_CodeEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


@dataclass(frozen=True, slots=True)
class StandardAcl:
    """One ACL without its id (Kafka's StandardAcl); equal ACLs are one ACL."""
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    @classmethod
    def from_record(cls, record: Any) -> "StandardAcl":
        return cls(ResourceType.from_code(record.resource_type), record.resource_name,
                   PatternType.from_code(record.pattern_type), record.principal, record.host,
                   AclOperation.from_code(record.operation), AclPermissionType.from_code(record.permission_type))

    def to_record(self, acl_id: Uuid) -> Any:
        return m.AccessControlEntryRecord(
            id=acl_id, resource_type=int(self.resource_type), resource_name=self.resource_name,
            pattern_type=int(self.pattern_type), principal=self.principal, host=self.host,
            operation=int(self.operation), permission_type=int(self.permission_type))

    def __str__(self) -> str:
        return (f"StandardAcl(resourceType={self.resource_type.name}, resourceName={self.resource_name}, "
                f"patternType={self.pattern_type.name}, principal={self.principal}, host={self.host}, "
                f"operation={self.operation.name}, permissionType={self.permission_type.name})")


class AclControlManager:
    """ACLs by id (Kafka's AclControlManager.idToAcl) and the set of distinct ACLs
    (existingAcls).  Invariant: every ACL in ``id_to_acl`` is in ``existing_acls``."""

    RECORD_TYPES: tuple[type, ...] = (m.AccessControlEntryRecord, m.RemoveAccessControlEntryRecord)

    def __init__(self, snapshot_registry: Any) -> None:
        self.registry = snapshot_registry
        self.id_to_acl = TimelineHashMap(snapshot_registry)
        self.existing_acls = TimelineHashSet(snapshot_registry)

    def replay(self, message: Any, offset: int) -> None:
        if message.API_KEY == m.AccessControlEntryRecord.API_KEY:
            acl = StandardAcl.from_record(message)
            self.id_to_acl.put(message.id, acl)
            self.existing_acls.add(acl)
            log.info("Replayed AccessControlEntryRecord for %s, setting %s", message.id, acl)
        elif message.API_KEY == m.RemoveAccessControlEntryRecord.API_KEY:
            acl = self.id_to_acl.get(message.id)
            if acl is None:
                raise ReplayError(f"Unable to replay {message!r}: no acl with that ID found.")
            if not self.existing_acls.contains(acl):
                raise ReplayError(f"Unable to replay {message!r} for {acl}: acl not found in existingAcls.")
            self.id_to_acl.remove(message.id)
            self.existing_acls.remove(acl)
            log.info("Replayed RemoveAccessControlEntryRecord for %s, removing %s", message.id, acl)
        else:
            raise ReplayError(f"AclControlManager cannot replay {type(message).__name__}")

    def acls(self, *, epoch: int = LATEST_EPOCH) -> dict[Uuid, StandardAcl]:
        return dict(self.id_to_acl.to_dict(epoch))

    def acl(self, acl_id: Uuid, *, epoch: int = LATEST_EPOCH) -> StandardAcl | None:
        acl: StandardAcl | None = self.id_to_acl.get(acl_id, epoch=epoch)
        return acl

    def contains_acl(self, acl: StandardAcl, *, epoch: int = LATEST_EPOCH) -> bool:
        return bool(self.existing_acls.contains(acl, epoch))

    def snapshot_records(self, epoch: int = LATEST_EPOCH, *,
                         metadata_version: MetadataVersion | None = None) -> Iterator[ApiMessageAndVersion]:
        """One AccessControlEntryRecord per ACL, by id.  Kafka writes ACLs at every
        metadata.version (it cannot tell 3.2-IV0, where they appeared, from 3.0-IV1)."""
        for acl_id, acl in sorted(self.id_to_acl.items(epoch), key=lambda e: e[0].bytes):
            yield ApiMessageAndVersion(acl.to_record(acl_id), 0)


# ---------------------------------------------------------------------------
# SCRAM
# ---------------------------------------------------------------------------

class ScramMechanism(_CodeEnum):
    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2


class ScramCredentialKey(NamedTuple):
    username: str
    mechanism: ScramMechanism

    def __str__(self) -> str:
        return f"ScramCredentialKey(username={self.username}, mechanism={self.mechanism.name})"


@dataclass(frozen=True, slots=True, repr=False)
class ScramCredentialValue:
    """A stored credential.  Its repr hides every field (they are secrets, and the
    iteration count helps an attacker too), as Kafka's toString does."""
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        return "ScramCredentialValue(salt=[hidden], storedKey=[hidden], serverKey=[hidden], iterations=[hidden])"


class ScramControlManager:
    """SCRAM credentials by (user, mechanism) (Kafka's ScramControlManager.credentials)."""

    RECORD_TYPES: tuple[type, ...] = (m.UserScramCredentialRecord, m.RemoveUserScramCredentialRecord)

    def __init__(self, snapshot_registry: Any, *, metadata_version: MetadataVersionAt | None = None) -> None:
        self.registry = snapshot_registry
        self._metadata_version = metadata_version
        self.credentials = TimelineHashMap(snapshot_registry)

    def replay(self, message: Any, offset: int) -> None:
        if message.API_KEY == m.UserScramCredentialRecord.API_KEY:
            key = ScramCredentialKey(message.name, ScramMechanism.from_code(message.mechanism))
            value = ScramCredentialValue(bytes(message.salt), bytes(message.stored_key),
                                         bytes(message.server_key), message.iterations)
            if self.credentials.put(key, value) is None:
                log.info("Replayed UserScramCredentialRecord creating new entry for %s with mechanism %s.",
                         key.username, key.mechanism.name)
            else:
                log.info("Replayed UserScramCredentialRecord modifying existing entry for %s with mechanism %s.",
                         key.username, key.mechanism.name)
        elif message.API_KEY == m.RemoveUserScramCredentialRecord.API_KEY:
            key = ScramCredentialKey(message.name, ScramMechanism.from_code(message.mechanism))
            if self.credentials.remove(key) is None:
                raise ReplayError(f"Unable to find credential to delete: {key}")
            log.info("Replayed RemoveUserScramCredentialRecord for %s with mechanism %s.",
                     key.username, key.mechanism.name)
        else:
            raise ReplayError(f"ScramControlManager cannot replay {type(message).__name__}")

    def credential(self, username: str, mechanism: ScramMechanism, *,
                   epoch: int = LATEST_EPOCH) -> ScramCredentialValue | None:
        value: ScramCredentialValue | None = self.credentials.get(ScramCredentialKey(username, mechanism),
                                                                  epoch=epoch)
        return value

    def all_credentials(self, *, epoch: int = LATEST_EPOCH) -> dict[ScramCredentialKey, ScramCredentialValue]:
        return dict(self.credentials.to_dict(epoch))

    def snapshot_records(self, epoch: int = LATEST_EPOCH, *,
                         metadata_version: MetadataVersion | None = None) -> Iterator[ApiMessageAndVersion]:
        """One UserScramCredentialRecord per credential, by mechanism then user."""
        mv = _mv_of(self._metadata_version, epoch, metadata_version)
        entries = sorted(self.credentials.items(epoch), key=lambda e: (e[0].mechanism, e[0].username))
        if mv is not None and not mv.is_scram_supported():
            if entries:
                raise UnwritableMetadataError(mv, _scram_loss(e[0] for e in entries))
            return
        for key, value in entries:
            yield ApiMessageAndVersion(m.UserScramCredentialRecord(
                name=key.username, mechanism=int(key.mechanism), salt=value.salt, stored_key=value.stored_key,
                server_key=value.server_key, iterations=value.iterations), 0)


def _scram_loss(keys: Iterable[ScramCredentialKey]) -> str:
    """Kafka's description of SCRAM state a metadata.version cannot hold: the users per
    mechanism, in ScramImage's odd bracketing (``ScramImage({SCRAM_SHA_256:alice},{})``)."""
    users: dict[ScramMechanism, list[str]] = {}
    for k in keys:
        users.setdefault(k.mechanism, []).append(k.username)
    text = "ScramImage({"
    for mech, names in users.items():
        text += f"{mech.name}:{', '.join(names)}" + "},{"
    return text + "})"


# ---------------------------------------------------------------------------
# Delegation tokens
# ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DelegationTokenData:
    """A delegation token's public information (Kafka's DelegationTokenData /
    TokenInformation); the HMAC is derived from the token id and the secret, never stored."""
    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    max_timestamp: int
    expiration_timestamp: int

    @classmethod
    def from_record(cls, record: Any) -> "DelegationTokenData":
        return cls(record.token_id, record.owner, record.requester, tuple(record.renewers),
                   record.issue_timestamp, record.max_timestamp, record.expiration_timestamp)

    def to_record(self) -> Any:
        return m.DelegationTokenRecord(
            owner=self.owner, requester=self.requester, renewers=list(self.renewers),
            issue_timestamp=self.issue_timestamp, max_timestamp=self.max_timestamp,
            expiration_timestamp=self.expiration_timestamp, token_id=self.token_id)


class DelegationTokenControlManager:
    """Delegation tokens by token id.  A DelegationTokenRecord creates or renews (replaces)
    a token; removing an unknown token is not an error (Kafka's image delta records the
    removal whether or not the token existed, and its controller only logs it)."""

    RECORD_TYPES: tuple[type, ...] = (m.DelegationTokenRecord, m.RemoveDelegationTokenRecord)

    def __init__(self, snapshot_registry: Any, *, metadata_version: MetadataVersionAt | None = None) -> None:
        self.registry = snapshot_registry
        self._metadata_version = metadata_version
        self.tokens_by_id = TimelineHashMap(snapshot_registry)

    def replay(self, message: Any, offset: int) -> None:
        if message.API_KEY == m.DelegationTokenRecord.API_KEY:
            self.tokens_by_id.put(message.token_id, DelegationTokenData.from_record(message))
            log.info("Replayed DelegationTokenRecord for %s.", message.token_id)
        elif message.API_KEY == m.RemoveDelegationTokenRecord.API_KEY:
            self.tokens_by_id.remove(message.token_id)
            log.info("Replayed RemoveDelegationTokenRecord for %s.", message.token_id)
        else:
            raise ReplayError(f"DelegationTokenControlManager cannot replay {type(message).__name__}")

    def token(self, token_id: str, *, epoch: int = LATEST_EPOCH) -> DelegationTokenData | None:
        data: DelegationTokenData | None = self.tokens_by_id.get(token_id, epoch=epoch)
        return data

    def tokens(self, *, epoch: int = LATEST_EPOCH) -> dict[str, DelegationTokenData]:
        return dict(self.tokens_by_id.to_dict(epoch))

    def snapshot_records(self, epoch: int = LATEST_EPOCH, *,
                         metadata_version: MetadataVersion | None = None) -> Iterator[ApiMessageAndVersion]:
        """One DelegationTokenRecord per token, by id."""
        mv = _mv_of(self._metadata_version, epoch, metadata_version)
        tokens = sorted(self.tokens_by_id.items(epoch))
        if mv is not None and not mv.is_delegation_token_supported():
            if tokens:
                ids = ", ".join(t for t, _ in tokens)
                raise UnwritableMetadataError(mv, f"DelegationTokenImage({ids})")
            return
        for _token_id, data in tokens:
            yield ApiMessageAndVersion(data.to_record(), 0)


# ---------------------------------------------------------------------------
# Client quotas
# ---------------------------------------------------------------------------

#: Kafka's ClientQuotaEntity entity types.
USER = "user"
CLIENT_ID = "client-id"
IP = "ip"


class ClientQuotaEntity:
    """Who a quota applies to: entity type -> name (None: the type's default), e.g.
    ``{"user": "alice", "client-id": None}``.  Immutable and hashable; equal mappings are
    the same entity whatever order the record listed them in."""

    __slots__ = ("_entries",)
    _entries: tuple[tuple[str, str | None], ...]

    def __init__(self, entries: Mapping[str, str | None]):
        object.__setattr__(self, "_entries", tuple(sorted(entries.items())))

    @classmethod
    def from_record(cls, record: Any) -> "ClientQuotaEntity":
        """The entity of a ClientQuotaRecord (a repeated type: the last one wins, as in Kafka)."""
        return cls({e.entity_type: e.entity_name for e in record.entity})

    @property
    def entries(self) -> dict[str, str | None]:
        return dict(self._entries)

    def to_entity_data(self) -> list[Any]:
        return [m.ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in self._entries]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClientQuotaEntity) and self._entries == other._entries

    def __hash__(self) -> int:
        return hash(self._entries)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("ClientQuotaEntity is immutable")

    def sort_key(self) -> tuple[tuple[str, bool, str], ...]:
        """A total order over entities (a default, None, sorts before any name)."""
        return tuple((t, n is not None, n or "") for t, n in self._entries)

    def __repr__(self) -> str:
        body = ", ".join(f"{t}={n}" for t, n in self._entries)
        return f"ClientQuotaEntity(entries={{{body}}})"


class ClientQuotaControlManager:
    """Client quotas: entity -> (key -> value), a timeline map of timeline maps (Kafka's
    clientQuotaData).  An entity is present iff it has at least one quota."""

    RECORD_TYPES: tuple[type, ...] = (m.ClientQuotaRecord,)

    def __init__(self, snapshot_registry: Any) -> None:
        self.registry = snapshot_registry
        self.client_quota_data = TimelineHashMap(snapshot_registry)

    def replay(self, message: Any, offset: int) -> None:
        """Set one quota of an entity, or (``remove``) drop it."""
        if message.API_KEY != m.ClientQuotaRecord.API_KEY:
            raise ReplayError(f"ClientQuotaControlManager cannot replay {type(message).__name__}")
        entity = ClientQuotaEntity.from_record(message)
        quotas = self.client_quota_data.get(entity)
        if message.remove:
            if quotas is not None:
                quotas.remove(message.key)
                if quotas.is_empty():
                    self.client_quota_data.remove(entity)
            log.info("Replayed ClientQuotaRecord for %r removing %s.", entity, message.key)
        else:
            if quotas is None:
                quotas = TimelineHashMap(self.registry)
                self.client_quota_data.put(entity, quotas)
            quotas.put(message.key, message.value)
            log.info("Replayed ClientQuotaRecord for %r setting %s to %s.", entity, message.key, message.value)

    def quotas(self, entity: ClientQuotaEntity, *, epoch: int = LATEST_EPOCH) -> dict[str, float]:
        quotas = self.client_quota_data.get(entity, epoch=epoch)
        return {} if quotas is None else dict(quotas.to_dict(epoch))

    def all_quotas(self, *, epoch: int = LATEST_EPOCH) -> dict[ClientQuotaEntity, dict[str, float]]:
        return {e: dict(q.to_dict(epoch)) for e, q in self.client_quota_data.items(epoch)}

    def snapshot_records(self, epoch: int = LATEST_EPOCH, *,
                         metadata_version: MetadataVersion | None = None) -> Iterator[ApiMessageAndVersion]:
        """One ClientQuotaRecord per (entity, key), as Kafka's ClientQuotasImage writes them."""
        for entity, quotas in sorted(self.client_quota_data.items(epoch), key=lambda e: e[0].sort_key()):
            for key, value in sorted(quotas.items(epoch)):
                yield ApiMessageAndVersion(m.ClientQuotaRecord(entity=entity.to_entity_data(), key=key,
                                                               value=value, remove=False), 0)
