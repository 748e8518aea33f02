"""The metadata image as a tree of nodes, laid out as Kafka's ``org.apache.kafka.image.node`` classes lay it out.

Paths (what ``ls``/``cat`` show, Kafka's names)::

    /image/provenance                          offset O, epoch E, time <ISO UTC>
    /image/features/metadataVersion            4.0-IV3
    /image/features/finalized_<feature>        its level
    /image/cluster/brokers/<id>                BrokerRegistration(...)
    /image/cluster/controllers/<id>            ControllerRegistration(...)
    /image/topics/byName/<name>/{name,id,<partition>}
    /image/topics/byId/<topic id>/...          the same topic
    /image/configs/<TYPE>[:<name>]/<key>       e.g. TOPIC:foo/cleanup.policy, BROKER (cluster default)
    /image/clientQuotas/<entity>/<key>         entity: clientId(a)_ip(b)_user(c)
    /image/producerIds/nextProducerId
    /image/acls/<acl id>                       StandardAcl(...) (Kafka lists ACL ids right under acls)
    /image/scram/<mechanism>/<user>            ScramCredentialData(...)
    /image/delegationToken/<token id>          DelegationTokenData...
    /local/{version,commitId}                  this shell's

Kafka 4 differences kept: no ``zkMigrationState`` under features (ZooKeeper migration is gone
and kraft's image does not keep it), and ``metadataVersion`` is absent while the image has
none (an image before the bootstrap records).  One extension: a client quota entity whose
name is the default (null) is written as the bare type (``user_clientId(x)``), which Kafka's
shell cannot show at all.

Every node is a view made when asked for: listing ``byName`` reads the persistent map's keys,
and only the topic opened is touched.
"""
from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import kraft_storage
from kraft_node.metadata.configs.resources import ConfigResource, ConfigResourceType
from kraft_node.metadata.controller.security_control import ClientQuotaEntity, ScramMechanism
from kraft_node.metadata.image.acls import AclsImage
from kraft_node.metadata.image.client_quotas import ClientQuotaImage, ClientQuotasImage
from kraft_node.metadata.image.cluster import ClusterImage
from kraft_node.metadata.image.configs import ConfigurationImage, ConfigurationsImage
from kraft_node.metadata.image.delegation_tokens import DelegationTokenImage
from kraft_node.metadata.image.features import FeaturesImage
from kraft_node.metadata.image.metadata_image import MetadataImage
from kraft_node.metadata.image.producer_ids import ProducerIdsImage
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.image.scram import ScramImage
from kraft_node.metadata.image.topics import TopicImage, TopicsImage
from kraft_node.metadata.shell.node import MetadataLeafNode, MetadataNode, MetadataNodePrinter
from kraft_node.metadata.shell.text import (
    broker_registration_text,
    controller_registration_text,
    java_double,
    utc_zoned_time,
)
from kraft_storage.messages.runtime import Uuid

__all__ = [
    "AclsImageByIdNode", "ClientQuotasImageNode", "ClusterImageNode", "ConfigurationsImageNode",
    "DelegationTokenImageNode", "FeaturesImageNode", "LocalShellNode", "MetadataImageNode", "ProducerIdsImageNode",
    "ProvenanceNode", "RootShellNode", "ScramImageNode", "TopicImageNode", "TopicsImageNode",
    "client_quota_entity_name", "decode_client_quota_entity",
]


def _int(name: str) -> int | None:
    """``name`` as Java's ``Integer.valueOf`` would read it (None when it is not an int)."""
    try:
        value = int(name, 10)
    except ValueError:
        return None
    return value if -(2**31) <= value < 2**31 and name.strip() == name and "_" not in name else None


def _uuid(name: str) -> Uuid | None:
    try:
        return Uuid.from_string(name)
    except ValueError:  # not a Uuid: no such child
        return None


class ProvenanceNode(MetadataNode):
    """``offset O, epoch E, time T`` of the last record in the image."""

    NAME = "provenance"
    __slots__ = ("provenance",)

    def __init__(self, provenance: MetadataProvenance) -> None:
        self.provenance = provenance

    def is_directory(self) -> bool:
        return False

    def print(self, printer: MetadataNodePrinter) -> None:
        p = self.provenance
        printer.output(f"offset {p.last_contained_offset}, epoch {p.last_contained_epoch}, "
                       f"time {utc_zoned_time(p.last_contained_log_time_ms)}")


class FeaturesImageNode(MetadataNode):
    NAME = "features"
    METADATA_VERSION = "metadataVersion"
    FINALIZED_PREFIX = "finalized_"
    __slots__ = ("image",)

    def __init__(self, image: FeaturesImage) -> None:
        self.image = image

    def child_names(self) -> Iterable[str]:
        names = [self.METADATA_VERSION] if self.image.metadata_version() is not None else []
        names.extend(self.FINALIZED_PREFIX + n for n in self.image.finalized_versions)
        return names

    def child(self, name: str) -> MetadataNode | None:
        if name == self.METADATA_VERSION:
            mv = self.image.metadata_version()
            return None if mv is None else MetadataLeafNode(str(mv))
        if name.startswith(self.FINALIZED_PREFIX):
            # as Kafka: any finalized_<x> reads, 0 for a feature that is not finalized
            return MetadataLeafNode(str(self.image.finalized_versions.get(name[len(self.FINALIZED_PREFIX):], 0)))
        return None


class _RegistrationsNode(MetadataNode):
    """Registrations by node id (brokers or controllers)."""

    __slots__ = ("registrations", "text")

    def __init__(self, registrations: Mapping[int, Any], text: Callable[[Any], str]) -> None:
        self.registrations = registrations
        self.text = text

    def child_names(self) -> Iterable[str]:
        return [str(i) for i in self.registrations]

    def child(self, name: str) -> MetadataNode | None:
        node_id = _int(name)
        reg = None if node_id is None else self.registrations.get(node_id)
        return None if reg is None else MetadataLeafNode(self.text(reg))


class ClusterImageNode(MetadataNode):
    NAME = "cluster"
    BROKERS = "brokers"
    CONTROLLERS = "controllers"
    __slots__ = ("image",)

    def __init__(self, image: ClusterImage) -> None:
        self.image = image

    def child_names(self) -> Iterable[str]:
        return (self.BROKERS, self.CONTROLLERS)

    def child(self, name: str) -> MetadataNode | None:
        if name == self.BROKERS:
            return _RegistrationsNode(self.image.brokers, broker_registration_text)
        if name == self.CONTROLLERS:
            return _RegistrationsNode(self.image.controllers, controller_registration_text)
        return None


class TopicImageNode(MetadataNode):
    """``name``, ``id``, then one file per partition (its PartitionRegistration)."""

    __slots__ = ("image",)

    def __init__(self, image: TopicImage) -> None:
        self.image = image

    def child_names(self) -> Iterable[str]:
        names = ["name", "id"]
        names.extend(str(p) for p in self.image.partitions)
        return names

    def child(self, name: str) -> MetadataNode | None:
        if name == "name":
            return MetadataLeafNode(self.image.name)
        if name == "id":
            return MetadataLeafNode(str(self.image.topic_id))
        pid = _int(name)
        reg = None if pid is None else self.image.partitions.get(pid)
        return None if reg is None else MetadataLeafNode(str(reg))


class _TopicsByNameNode(MetadataNode):
    __slots__ = ("image",)

    def __init__(self, image: TopicsImage) -> None:
        self.image = image

    def child_names(self) -> Iterable[str]:
        return self.image.topics_by_name.keys()

    def child(self, name: str) -> MetadataNode | None:
        topic = self.image.topics_by_name.get(name)
        return None if topic is None else TopicImageNode(topic)


class _TopicsByIdNode(MetadataNode):
    __slots__ = ("image",)

    def __init__(self, image: TopicsImage) -> None:
        self.image = image

    def child_names(self) -> Iterable[str]:
        return [str(t) for t in self.image.topics_by_id.keys()]

    def child(self, name: str) -> MetadataNode | None:
        tid = _uuid(name)
        topic = None if tid is None else self.image.topics_by_id.get(tid)
        return None if topic is None else TopicImageNode(topic)


class TopicsImageNode(MetadataNode):
    NAME = "topics"
    BY_NAME = "byName"
    BY_ID = "byId"
    __slots__ = ("image",)

    def __init__(self, image: TopicsImage) -> None:
        self.image = image

    def child_names(self) -> Iterable[str]:
        return (self.BY_NAME, self.BY_ID)

    def child(self, name: str) -> MetadataNode | None:
        if name == self.BY_NAME:
            return _TopicsByNameNode(self.image)
        if name == self.BY_ID:
            return _TopicsByIdNode(self.image)
        return None


#: Kafka's ``ConfigResource.Type.values()`` order, which ``resourceFromName`` tries prefixes in
#: (BROKER_LOGGER before BROKER, so ``BROKER_LOGGER:1`` is not read as BROKER ``_LOGGER:1``)
_CONFIG_TYPES_IN_KAFKA_ORDER = (ConfigResourceType.GROUP, ConfigResourceType.CLIENT_METRICS,
                                ConfigResourceType.BROKER_LOGGER, ConfigResourceType.BROKER,
                                ConfigResourceType.TOPIC, ConfigResourceType.UNKNOWN)


def config_resource_name(resource: ConfigResource) -> str:
    """``TOPIC:foo``, ``BROKER:1``, or the bare type for a default resource (empty name)."""
    return resource.type.name if resource.name == "" else f"{resource.type.name}:{resource.name}"


def config_resource_from_name(name: str) -> ConfigResource | None:
    for t in _CONFIG_TYPES_IN_KAFKA_ORDER:
        if name.startswith(t.name):
            rest = name[len(t.name):]
            if rest == "":
                return ConfigResource(t, "")
            if rest.startswith(":"):
                return ConfigResource(t, rest[1:])
            return None
    return None


class ConfigurationImageNode(MetadataNode):
    """One resource's configs: key -> value (redacted when the printer says the key is secret)."""

    __slots__ = ("image",)

    def __init__(self, image: ConfigurationImage) -> None:
        self.image = image

    def child_names(self) -> Iterable[str]:
        return self.image.data.keys()

    def child(self, name: str) -> MetadataNode | None:
        value = self.image.data.get(name)
        return None if value is None else _ConfigValueNode(self.image.resource.type.name, name, value)


class _ConfigValueNode(MetadataNode):
    __slots__ = ("resource_type", "key", "value")

    def __init__(self, resource_type: str, key: str, value: str) -> None:
        self.resource_type = resource_type
        self.key = key
        self.value = value

    def is_directory(self) -> bool:
        return False

    def print(self, printer: MetadataNodePrinter) -> None:
        if printer.redaction_criteria().should_redact_config(self.resource_type, self.key):
            printer.output("[redacted]")
        else:
            printer.output(self.value)


class ConfigurationsImageNode(MetadataNode):
    NAME = "configs"
    __slots__ = ("image",)

    def __init__(self, image: ConfigurationsImage) -> None:
        self.image = image

    def child_names(self) -> Iterable[str]:
        return [config_resource_name(r) for r in self.image.resource_data]

    def child(self, name: str) -> MetadataNode | None:
        resource = config_resource_from_name(name)
        config = None if resource is None else self.image.resource_data.get(resource)
        return None if config is None else ConfigurationImageNode(config)


# -- client quotas --------------------------------------------------------------------------

_QUOTA_TYPES = (("client-id", "clientId"), ("ip", "ip"), ("user", "user"))
_QUOTA_PREFIX = {short: long for long, short in _QUOTA_TYPES}


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def client_quota_entity_name(entity: ClientQuotaEntity) -> str:
    """``clientId(a)_ip(b)_user(c)`` (those present, in that order; ``\\``, ``(`` and ``)`` escaped).
    A default (null) name is the bare type.  ValueError for an empty entity or an unknown type,
    as Kafka's."""
    entries = entity.entries
    if not entries:
        raise ValueError("Invalid empty entity")
    for t in entries:
        if t not in _QUOTA_PREFIX.values():
            raise ValueError(f"Invalid entity type {t}")
    parts = []
    for long_name, short in _QUOTA_TYPES:
        if long_name in entries:
            value = entries[long_name]
            parts.append(short if value is None else f"{short}({_escape(value)})")
    return "_".join(parts)


def decode_client_quota_entity(text: str) -> ClientQuotaEntity | None:
    """The entity a child name stands for (None when the name is not one)."""
    entries: dict[str, str | None] = {}
    i, n = 0, len(text)
    if n == 0:
        return None
    while i < n:
        for short in ("clientId", "ip", "user"):
            if text.startswith(short, i):
                kind = _QUOTA_PREFIX[short]
                i += len(short)
                break
        else:
            return None
        if i < n and text[i] == "(":
            i += 1
            value: list[str] = []
            while True:
                if i >= n:
                    return None
                c = text[i]
                i += 1
                if c == "\\":
                    if i >= n:
                        return None
                    value.append(text[i])
                    i += 1
                elif c == ")":
                    break
                else:
                    value.append(c)
            entries[kind] = "".join(value)
        else:
            entries[kind] = None
        if i < n:
            if text[i] != "_":
                return None
            i += 1
            if i == n:
                return None
    return ClientQuotaEntity(entries)


class ClientQuotaImageNode(MetadataNode):
    __slots__ = ("image",)

    def __init__(self, image: ClientQuotaImage) -> None:
        self.image = image

    def child_names(self) -> Iterable[str]:
        return self.image.quotas.keys()

    def child(self, name: str) -> MetadataNode | None:
        value = self.image.quotas.get(name)
        return None if value is None else MetadataLeafNode(java_double(value))


class ClientQuotasImageNode(MetadataNode):
    NAME = "clientQuotas"
    __slots__ = ("image",)

    def __init__(self, image: ClientQuotasImage) -> None:
        self.image = image

    def child_names(self) -> Iterable[str]:
        return [client_quota_entity_name(e) for e in self.image.entities]

    def child(self, name: str) -> MetadataNode | None:
        entity = decode_client_quota_entity(name)
        quota = None if entity is None else self.image.entities.get(entity)
        return None if quota is None else ClientQuotaImageNode(quota)


class ProducerIdsImageNode(MetadataNode):
    NAME = "producerIds"
    __slots__ = ("image",)

    def __init__(self, image: ProducerIdsImage) -> None:
        self.image = image

    def child_names(self) -> Iterable[str]:
        return ("nextProducerId",)

    def child(self, name: str) -> MetadataNode | None:
        return MetadataLeafNode(str(self.image.next_producer_id)) if name == "nextProducerId" else None


class AclsImageByIdNode(MetadataNode):
    """ACLs by id (Kafka puts these right under ``/image/acls``)."""

    NAME = "byId"
    __slots__ = ("image",)

    def __init__(self, image: AclsImage) -> None:
        self.image = image

    def child_names(self) -> Iterable[str]:
        return [str(i) for i in self.image.acls]

    def child(self, name: str) -> MetadataNode | None:
        acl_id = _uuid(name)
        acl = None if acl_id is None else self.image.acls.get(acl_id)
        return None if acl is None else MetadataLeafNode(str(acl))


class _ScramCredentialNode(MetadataNode):
    __slots__ = ("credential",)

    def __init__(self, credential: Any) -> None:
        self.credential = credential

    def is_directory(self) -> bool:
        return False

    def print(self, printer: MetadataNodePrinter) -> None:
        c = self.credential
        redact = printer.redaction_criteria().should_redact_scram()

        def show(value: str) -> str:
            return "[redacted]" if redact else value

        printer.output(f"ScramCredentialData(salt={show(bytes(c.salt).hex())}, "
                       f"storedKey={show(bytes(c.stored_key).hex())}, serverKey={show(bytes(c.server_key).hex())}, "
                       f"iterations={show(str(c.iterations))})")


class _ScramMechanismNode(MetadataNode):
    __slots__ = ("users",)

    def __init__(self, users: Mapping[str, Any]) -> None:
        self.users = users

    def child_names(self) -> Iterable[str]:
        return self.users.keys()

    def child(self, name: str) -> MetadataNode | None:
        cred = self.users.get(name)
        return None if cred is None else _ScramCredentialNode(cred)


def _mechanism_name(mechanism: ScramMechanism) -> str:
    """``SCRAM-SHA-256`` for SCRAM_SHA_256 (Kafka's ``mechanismName``)."""
    return mechanism.name.replace("_", "-")


class ScramImageNode(MetadataNode):
    """One directory per known mechanism (present even with no user, as Kafka's)."""

    NAME = "scram"
    __slots__ = ("image",)

    def __init__(self, image: ScramImage) -> None:
        self.image = image

    def child_names(self) -> Iterable[str]:
        return [_mechanism_name(mech) for mech in ScramMechanism if mech is not ScramMechanism.UNKNOWN]

    def child(self, name: str) -> MetadataNode | None:
        for mech in ScramMechanism:
            if mech is not ScramMechanism.UNKNOWN and _mechanism_name(mech) == name:
                users = self.image.mechanisms.get(mech)
                return _ScramMechanismNode(users if users is not None else {})
        return None


class _DelegationTokenNode(MetadataNode):
    __slots__ = ("data",)

    def __init__(self, data: Any) -> None:
        self.data = data

    def is_directory(self) -> bool:
        return False

    def print(self, printer: MetadataNodePrinter) -> None:
        d = self.data
        redact = printer.redaction_criteria().should_redact_delegation_token()

        def show(value: object) -> str:
            return "[redacted]" if redact else str(value)

        # Kafka's DelegationTokenDataNode layout, parentheses and all
        printer.output(f"DelegationTokenDatatokenId={show(d.token_id)}(owner={show(d.owner)}"
                       f"(tokenRequester={show(d.requester)}(renewers={show(' '.join(d.renewers))}"
                       f", issueTimestamp={show(d.issue_timestamp)}, maxTimestamp={show(d.max_timestamp)})"
                       f", expiryTimestamp={show(d.expiration_timestamp)}")


class DelegationTokenImageNode(MetadataNode):
    NAME = "delegationToken"
    __slots__ = ("image",)

    def __init__(self, image: DelegationTokenImage) -> None:
        self.image = image

    def child_names(self) -> Iterable[str]:
        return self.image.tokens.keys()

    def child(self, name: str) -> MetadataNode | None:
        data = self.image.tokens.get(name)
        return None if data is None else _DelegationTokenNode(data)


class MetadataImageNode(MetadataNode):
    """``/image``: one child per sub-image, and the provenance."""

    NAME = "image"
    __slots__ = ("image",)

    _CHILDREN: dict[str, Callable[[MetadataImage], MetadataNode]] = {
        ProvenanceNode.NAME: lambda i: ProvenanceNode(i.provenance),
        FeaturesImageNode.NAME: lambda i: FeaturesImageNode(i.features),
        ClusterImageNode.NAME: lambda i: ClusterImageNode(i.cluster),
        TopicsImageNode.NAME: lambda i: TopicsImageNode(i.topics),
        ConfigurationsImageNode.NAME: lambda i: ConfigurationsImageNode(i.configs),
        ClientQuotasImageNode.NAME: lambda i: ClientQuotasImageNode(i.client_quotas),
        ProducerIdsImageNode.NAME: lambda i: ProducerIdsImageNode(i.producer_ids),
        "acls": lambda i: AclsImageByIdNode(i.acls),
        ScramImageNode.NAME: lambda i: ScramImageNode(i.scram),
        DelegationTokenImageNode.NAME: lambda i: DelegationTokenImageNode(i.delegation_tokens),
    }

    def __init__(self, image: MetadataImage) -> None:
        self.image = image

    def child_names(self) -> Iterable[str]:
        return self._CHILDREN.keys()

    def child(self, name: str) -> MetadataNode | None:
        make = self._CHILDREN.get(name)
        return None if make is None else make(self.image)


class LocalShellNode(MetadataNode):
    """``/local``: about this shell (its version and commit)."""

    NAME = "local"
    __slots__ = ()

    def child_names(self) -> Iterable[str]:
        return ("version", "commitId")

    def child(self, name: str) -> MetadataNode | None:
        if name == "version":
            return MetadataLeafNode(_software_version())
        if name == "commitId":
            return MetadataLeafNode(_commit_id())
        return None


def _software_version() -> str:
    try:
        return importlib.metadata.version("kraft")
    except importlib.metadata.PackageNotFoundError:
        return kraft_storage.__version__


def _commit_id() -> str:
    """The build's commit when the environment says it (``KRAFT_COMMIT_ID``), else Kafka's "unknown"."""
    return os.environ.get("KRAFT_COMMIT_ID", "unknown")


class RootShellNode(MetadataNode):
    """``/``: ``local`` and ``image``."""

    __slots__ = ("image",)

    def __init__(self, image: MetadataImage) -> None:
        self.image = image

    def child_names(self) -> Iterable[str]:
        return (LocalShellNode.NAME, MetadataImageNode.NAME)

    def child(self, name: str) -> MetadataNode | None:
        if name == LocalShellNode.NAME:
            return LocalShellNode()
        if name == MetadataImageNode.NAME:
            return MetadataImageNode(self.image)
        return None
