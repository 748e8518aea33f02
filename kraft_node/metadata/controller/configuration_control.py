"""Kafka's ConfigurationControlManager: the dynamic configs of topics, brokers, broker loggers,
client-metrics subscriptions and groups -- their state and replay, and the write side
(IncrementalAlterConfigs, the legacy AlterConfigs, topic-creation configs) that turns a request
into ``ConfigRecord``s.

Why the shape: Kafka keeps ``TimelineHashMap<ConfigResource, TimelineHashMap<String, String>>``
and every config read the controller serves (DescribeConfigs, a topic's
``min.insync.replicas`` during AlterPartition, the cluster defaults under broker ``""``)
looks a resource up and then a key, at the last committed offset.  Nested timeline maps give
both lookups at any registry epoch, and a revert undoes uncommitted changes to either level.

Invariants:

* a resource is present iff it has at least one key (the last key's removal removes it),
  so "no dynamic config" reads the same whether it never had one or lost its last;
* a ConfigRecord with a null value deletes the key (a delete of an absent key is a no-op,
  as in Kafka);
* the resource type is Kafka's ``ConfigResource.Type.forId``: an id it does not know maps
  to ``UNKNOWN`` (and is written back as 0 in a snapshot, as Kafka's image writer does);
* ``brokers_with_configs`` is exactly the numeric broker names with at least one key (the
  ELR safety records walk it instead of every resource);
* write methods change nothing: they return records (one atomic batch) and per-resource
  errors; only ``replay`` mutates.  A resource whose check fails contributes no record, the
  others still do (Kafka's per-resource answer).

The write path, per resource: compute the new value of each key (SET / DELETE / APPEND and
SUBTRACT on LIST keys, an unset list starting from the key's default); a key whose value does
not change writes no record, except on BROKER resources (KAFKA-14136: the record makes brokers
reload, e.g. a rotated keystore file).  Then, in Kafka's order: the KIP-966 ``min.insync.replicas``
rules while ELR is on, the validator (``configs.validator``), the existence check (skipped for a
topic being created), the AlterConfigPolicy.  When ELR is on, every ``min.insync.replicas``
change also writes ClearElrRecords (KAFKA-16540: one record per change -- one for a topic, one
"all topics" record for a broker or cluster change -- rather than a PartitionChangeRecord per
partition, which for a cluster-wide change could exceed the batch limit and wedge the
controller); the replication manager replays them.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterator, Mapping, Protocol, Sequence

from kraft_node.metadata.configs.resources import DEFAULT_NODE, AlterConfigOp, ConfigResource, ConfigResourceType
from kraft_node.metadata.configs.schema import KAFKA_CONFIG_SCHEMA, ConfigEntry, KafkaConfigSchema
from kraft_node.metadata.configs.topic import MIN_IN_SYNC_REPLICAS_CONFIG, UNCLEAN_LEADER_ELECTION_ENABLE_CONFIG
from kraft_node.metadata.configs.types import ConfigError, ConfigType, java_split, parse_java_int, parse_type
from kraft_node.metadata.configs.validator import ConfigurationValidator, ControllerConfigurationValidator
from kraft_node.metadata.controller.errors import ApiError, ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.metadata.versions import ELIGIBLE_LEADER_REPLICAS_VERSION, MetadataVersion
from kraft_node.protocol.errors import Errors
from kraft_storage.messages import metadata as m
from kraft_storage.timeline import LATEST_EPOCH, TimelineHashMap, TimelineHashSet

if TYPE_CHECKING:
    from kraft_node.metadata.controller.features import FeatureControlManager

__all__ = [
    "ConfigResourceType", "ConfigResource", "AlterConfigOp", "DEFAULT_NODE", "NONE", "AlterConfigPolicyRequest",
    "AlterConfigPolicy", "MinIsrChangedHook", "ConfigurationControlManager", "clear_elr_records",
    "config_resource_existence_checker", "ALTER_CONFIG_POLICY_CLASS_NAME_CONFIG",
]

log = logging.getLogger("kraft.controller.configs")

#: Kafka's ``ApiError.NONE``: the per-resource answer of a change that was accepted.
NONE = ApiError(Errors.NONE)

#: The static key naming a Java AlterConfigPolicy class; kraft cannot load one and refuses it.
ALTER_CONFIG_POLICY_CLASS_NAME_CONFIG = "alter.config.policy.class.name"

DISALLOWED_BROKER_MIN_ISR_TRANSITION_ERROR = ApiError(
    Errors.INVALID_CONFIG, f"Broker-level {MIN_IN_SYNC_REPLICAS_CONFIG} cannot be altered while ELR is enabled.")
DISALLOWED_CLUSTER_MIN_ISR_REMOVAL_ERROR = ApiError(
    Errors.INVALID_CONFIG, f"Cluster-level {MIN_IN_SYNC_REPLICAS_CONFIG} cannot be removed while ELR is enabled.")


def _java_map_str(configs: Mapping[str, str | None]) -> str:
    return "{" + ", ".join(f"{k}={'null' if v is None else v}" for k, v in configs.items()) + "}"


@dataclass(frozen=True)
class AlterConfigPolicyRequest:
    """Kafka's ``AlterConfigPolicy.RequestMetadata``: the resource and the keys the request
    sets (None: deleted).  Keys the legacy AlterConfigs removes by omission are not included
    (KAFKA-14195)."""
    resource: ConfigResource
    configs: Mapping[str, str | None] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"AlterConfigPolicy.RequestMetadata(resource={self.resource}, configs={_java_map_str(self.configs)})"


#: A policy raises ApiError (e.g. POLICY_VIOLATION) to refuse a change.
AlterConfigPolicy = Callable[[AlterConfigPolicyRequest], None]
#: Given the ``min.insync.replicas`` ConfigRecords of a result (ELR on), the records to add.
MinIsrChangedHook = Callable[[Sequence[Any]], Sequence[ApiMessageAndVersion]]


def clear_elr_records(min_isr_changes: Sequence[Any]) -> list[ApiMessageAndVersion]:
    """Kafka's ``createClearElrRecordsAsNeeded``: a ClearElrRecord for the topic of each
    topic-level change, an all-topics one (empty name) for each broker or cluster change."""
    out = []
    for record in min_isr_changes:
        if ConfigResourceType.for_id(record.resource_type) == ConfigResourceType.TOPIC:
            out.append(ApiMessageAndVersion(m.ClearElrRecord(topic_name=record.resource_name), 0))
        else:
            out.append(ApiMessageAndVersion(m.ClearElrRecord(), 0))
    return out


def config_resource_existence_checker(*, broker_registered: Callable[[int], bool],
                                      is_controller_id: Callable[[int], bool],
                                      topic_exists: Callable[[str], bool]) -> Callable[[ConfigResource], None]:
    """Kafka's ``QuorumController.ConfigResourceExistenceChecker``: BROKER ``""`` and
    BROKER_LOGGER always exist; a BROKER name must be an int registered as a broker or a
    controller (BROKER_ID_NOT_REGISTERED "No node with id N found."); a TOPIC must exist
    (UNKNOWN_TOPIC_OR_PARTITION "The topic 'x' does not exist.")."""

    def check(resource: ConfigResource) -> None:
        if resource.type == ConfigResourceType.BROKER and resource.name != "":
            try:
                node_id = parse_java_int(resource.name)
            except ValueError:
                raise ApiError(Errors.INVALID_REQUEST, f"Invalid broker name {resource.name}") from None
            if not (broker_registered(node_id) or is_controller_id(node_id)):
                raise ApiError(Errors.BROKER_ID_NOT_REGISTERED, f"No node with id {node_id} found.")
        elif resource.type == ConfigResourceType.TOPIC and not topic_exists(resource.name):
            raise ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{resource.name}' does not exist.")

    return check


def _always_exists(resource: ConfigResource) -> None:
    return None


class _ElrFeature(Protocol):
    def is_elr_enabled(self, *, epoch: int = ...) -> bool: ...


_MISSING = object()


class _ConfigsView(Mapping[str, str]):
    """A read-only view of one resource's configs at an epoch, without copying them (effective
    values look up a few keys per call: ``min_isr`` runs on every ISR change)."""

    __slots__ = ("_configs", "_epoch")

    def __init__(self, configs: Any, epoch: int):
        self._configs, self._epoch = configs, epoch

    def get(self, key: str, default: Any = None) -> Any:
        return default if self._configs is None else self._configs.get(key, default, epoch=self._epoch)

    def __getitem__(self, key: str) -> str:
        value = _MISSING if self._configs is None else self._configs.get(key, _MISSING, epoch=self._epoch)
        if value is _MISSING:
            raise KeyError(key)
        assert isinstance(value, str)
        return value

    def __contains__(self, key: object) -> bool:
        return self._configs is not None and self._configs.contains(key, self._epoch)

    def __iter__(self) -> Iterator[str]:
        return iter(() if self._configs is None else list(self._configs.keys(self._epoch)))

    def __len__(self) -> int:
        return 0 if self._configs is None else int(self._configs.size(self._epoch))


def _config_record(resource: ConfigResource, key: str, value: str | None) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(m.ConfigRecord(resource_type=int(resource.type), resource_name=resource.name,
                                               name=key, value=value), 0)


class ConfigurationControlManager:
    """Dynamic configs: the state, its replay and the write side (see the module doc).

    Construction (all keyword, all optional; ``ConfigurationControlManager(registry)`` is a
    manager with Kafka's schema, the KRaft validator over an empty static config, and no
    existence check, policy, node layer or ELR):

    * ``schema``: key types and defaults (Kafka's ``KafkaConfigSchema``);
    * ``validator``: a ``ConfigurationValidator`` (default ``ControllerConfigurationValidator(static_config)``);
    * ``existence_checker``: raises ApiError when a resource does not exist
      (:func:`config_resource_existence_checker`);
    * ``alter_config_policy``: a Python callable (Kafka's AlterConfigPolicy); the static
      ``alter.config.policy.class.name`` (a Java class) is refused;
    * ``static_config``: the node's static config (effective values, ELR's cluster level);
    * ``node_id``: this controller's id, for the DYNAMIC_BROKER_CONFIG level of effective values;
    * ``feature_control``: whose ``is_elr_enabled()`` turns on the KIP-966 rules and ``update_features``;
    * ``min_isr_changed``: replaces :func:`clear_elr_records` as the records a
      ``min.insync.replicas`` change adds while ELR is on.
    """

    RECORD_TYPES: tuple[type, ...] = (m.ConfigRecord,)

    def __init__(self, snapshot_registry: Any, *, schema: KafkaConfigSchema = KAFKA_CONFIG_SCHEMA,
                 validator: ConfigurationValidator | None = None,
                 existence_checker: Callable[[ConfigResource], None] | None = None,
                 alter_config_policy: AlterConfigPolicy | None = None,
                 static_config: Mapping[str, str] | None = None, node_id: int | None = None,
                 feature_control: FeatureControlManager | _ElrFeature | None = None,
                 min_isr_changed: MinIsrChangedHook | None = None) -> None:
        self.registry = snapshot_registry
        self.schema = schema
        self.static_config: dict[str, str] = dict(static_config or {})
        policy_class = self.static_config.get(ALTER_CONFIG_POLICY_CLASS_NAME_CONFIG, "").strip()
        if policy_class:
            raise ConfigError(f"{ALTER_CONFIG_POLICY_CLASS_NAME_CONFIG} is not supported by kraft: it cannot load "
                              f"the Java class {policy_class}; unset it")
        self.validator: ConfigurationValidator = (validator if validator is not None
                                                  else ControllerConfigurationValidator(self.static_config))
        self.existence_checker = existence_checker if existence_checker is not None else _always_exists
        self.alter_config_policy = alter_config_policy
        self.node_id = node_id
        self.feature_control = feature_control
        self.min_isr_changed: MinIsrChangedHook = min_isr_changed if min_isr_changed is not None else clear_elr_records
        #: ConfigResource -> TimelineHashMap of name -> value
        self.config_data = TimelineHashMap(snapshot_registry)
        #: numeric names of BROKER resources with at least one key
        self._brokers_with_configs = TimelineHashSet(snapshot_registry)

    # ------------------------------------------------------------------ replay
    def replay(self, message: Any, offset: int) -> None:
        """Set (or, value None, delete) one key of one resource."""
        if message.API_KEY != m.ConfigRecord.API_KEY:
            raise ReplayError(f"ConfigurationControlManager cannot replay {type(message).__name__}")
        resource = ConfigResource(ConfigResourceType.for_id(message.resource_type), message.resource_name)
        broker_id = self._broker_id(resource)
        configs = self.config_data.get(resource)
        if message.value is None:
            if configs is not None:
                configs.remove(message.name)
                if configs.is_empty():
                    self.config_data.remove(resource)
                    if broker_id is not None:
                        self._brokers_with_configs.remove(broker_id)
        else:
            if configs is None:
                configs = TimelineHashMap(self.registry)
                self.config_data.put(resource, configs)
                if broker_id is not None:
                    self._brokers_with_configs.add(broker_id)
            configs.put(message.name, message.value)
        shown = "[hidden]" if self.schema.is_sensitive(resource.type, message.name) else message.value
        log.info("Replayed ConfigRecord for %s which set configuration %s to %s", resource, message.name, shown)

    @staticmethod
    def _broker_id(resource: ConfigResource) -> int | None:
        """The id of a named BROKER resource (None otherwise); a name that is not an int is a
        record no controller writes (its validator refuses it): fatal, as in Kafka."""
        if resource.type != ConfigResourceType.BROKER or resource.name == "":
            return None
        try:
            return parse_java_int(resource.name)
        except ValueError:
            raise ReplayError(f"ConfigRecord for {resource}: the broker name is not an integer") from None

    def delete_topic_configs(self, name: str) -> None:
        """Forget a deleted topic's configs (ReplicationControlManager's RemoveTopicRecord
        replay calls this: Kafka writes no ConfigRecords for a topic deletion)."""
        self.config_data.remove(ConfigResource.topic(name))

    # ------------------------------------------------------------------ reads
    def configs(self, resource: ConfigResource, *, epoch: int = LATEST_EPOCH) -> dict[str, str]:
        """The dynamic configs of ``resource`` (empty when it has none)."""
        configs = self.config_data.get(resource, epoch=epoch)
        return {} if configs is None else dict(configs.to_dict(epoch))

    def config(self, resource: ConfigResource, name: str, *, epoch: int = LATEST_EPOCH) -> str | None:
        """One key's value, or None when it is not set dynamically."""
        configs = self.config_data.get(resource, epoch=epoch)
        return None if configs is None else configs.get(name, epoch=epoch)

    def resources(self, *, epoch: int = LATEST_EPOCH) -> list[ConfigResource]:
        """Every resource with at least one dynamic config."""
        return list(self.config_data.keys(epoch))

    def all_configs(self, *, epoch: int = LATEST_EPOCH) -> dict[ConfigResource, dict[str, str]]:
        return {r: dict(c.to_dict(epoch)) for r, c in self.config_data.items(epoch)}

    def brokers_with_configs(self, *, epoch: int = LATEST_EPOCH) -> set[int]:
        """The ids of brokers with a broker-level config."""
        return set(self._brokers_with_configs.to_set(epoch))

    def cluster_config(self, *, epoch: int = LATEST_EPOCH) -> dict[str, str]:
        """The cluster-wide dynamic broker configs (resource BROKER ``""``)."""
        return self.configs(DEFAULT_NODE, epoch=epoch)

    def current_controller_config(self, *, epoch: int = LATEST_EPOCH) -> dict[str, str]:
        """This node's dynamic broker configs (empty without a ``node_id``)."""
        return {} if self.node_id is None else self.configs(ConfigResource.broker(str(self.node_id)), epoch=epoch)

    def describe_configs(self, resources: Mapping[ConfigResource, Collection[str]], *,
                         epoch: int = LATEST_EPOCH) -> dict[ConfigResource, tuple[ApiError, dict[str, str]]]:
        """The stored overrides of each resource (all keys, or the keys asked for that are set),
        or the validator's error for a resource that may not be described."""
        out: dict[ConfigResource, tuple[ApiError, dict[str, str]]] = {}
        for resource, keys in resources.items():
            try:
                self.validator.validate_resource(resource)
            except ApiError as exc:
                out[resource] = (exc, {})
                continue
            stored = self.configs(resource, epoch=epoch)
            found = stored if not keys else {k: stored[k] for k in keys if k in stored}
            out[resource] = (NONE, found)
        return out

    # ------------------------------------------------------------------ effective values
    def _view(self, resource: ConfigResource, epoch: int) -> _ConfigsView:
        return _ConfigsView(self.config_data.get(resource, epoch=epoch), epoch)

    def topic_config_entry(self, topic_name: str, key: str, *, epoch: int = LATEST_EPOCH,
                           include_synonyms: bool = False) -> ConfigEntry:
        """A topic key's effective value and source: topic override, this node's dynamic
        config, the cluster's, the static config, the default (KeyError for a key that is not
        a topic config)."""
        node = {} if self.node_id is None else self._view(ConfigResource.broker(str(self.node_id)), epoch)
        return self.schema.resolve_effective_topic_config(
            key, self.static_config, self._view(DEFAULT_NODE, epoch), node,
            self._view(ConfigResource.topic(topic_name), epoch), include_synonyms=include_synonyms)

    def topic_config(self, topic_name: str, key: str, *, epoch: int = LATEST_EPOCH) -> str | None:
        """A topic key's effective value (None when it resolves to a null default)."""
        node = {} if self.node_id is None else self._view(ConfigResource.broker(str(self.node_id)), epoch)
        topic = self._view(ConfigResource(ConfigResourceType.TOPIC, topic_name), epoch)
        return self.schema.effective_topic_value(key, self.static_config, self._view(DEFAULT_NODE, epoch), node, topic)

    def min_isr(self, topic_name: str, *, epoch: int = LATEST_EPOCH) -> int:
        """The topic's effective ``min.insync.replicas``."""
        value = self.topic_config(topic_name, MIN_IN_SYNC_REPLICAS_CONFIG, epoch=epoch)
        parsed = parse_type(MIN_IN_SYNC_REPLICAS_CONFIG, value if value is not None else "1", ConfigType.INT)
        assert isinstance(parsed, int)
        return parsed

    def unclean_leader_election_enabled(self, topic_name: str, *, epoch: int = LATEST_EPOCH) -> bool:
        """Kafka's ``uncleanLeaderElectionEnabledForTopic``: the effective value is ``true``
        (``Boolean.parseBoolean``: any case, no trimming)."""
        value = self.topic_config(topic_name, UNCLEAN_LEADER_ELECTION_ENABLE_CONFIG, epoch=epoch)
        return value is not None and value.lower() == "true"

    def compute_effective_topic_configs(self, creation_configs: Mapping[str, str], *,
                                        epoch: int = LATEST_EPOCH) -> dict[str, ConfigEntry]:
        """Every topic key's effective value for a topic created with ``creation_configs``
        (CreateTopics' response configs)."""
        return self.schema.resolve_effective_topic_configs(
            self.static_config, self.cluster_config(epoch=epoch), self.current_controller_config(epoch=epoch),
            creation_configs)

    def describe_topic_config_entries(self, topic_name: str, keys: Collection[str] | None = None, *,
                                      epoch: int = LATEST_EPOCH, include_synonyms: bool = False,
                                      include_documentation: bool = False) -> list[ConfigEntry]:
        """DescribeConfigs entries of a topic: every topic key (or the known ones of ``keys``)
        with its effective value and source (DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG,
        DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG)."""
        entries = self.schema.resolve_effective_topic_configs(
            self.static_config, self.cluster_config(epoch=epoch), self.current_controller_config(epoch=epoch),
            self.configs(ConfigResource.topic(topic_name), epoch=epoch), include_synonyms=include_synonyms)
        wanted = entries.keys() if not keys else [k for k in keys if k in entries]
        out = []
        for name in sorted(wanted):
            entry = entries[name]
            if not include_documentation and entry.documentation is not None:
                entry = ConfigEntry(entry.name, entry.value, entry.source, entry.is_sensitive, entry.is_read_only,
                                    entry.type, None, entry.synonyms)
            out.append(entry)
        return out

    def describe_broker_config_entries(self, resource_name: str, keys: Collection[str] | None = None, *,
                                       epoch: int = LATEST_EPOCH, include_synonyms: bool = False,
                                       include_documentation: bool = False) -> list[ConfigEntry]:
        """DescribeConfigs entries of a BROKER resource (``""``: the cluster-level keys only; a
        broker id: every key, node dynamic > cluster dynamic > this node's static > default)."""
        node = {} if resource_name == "" else self.configs(ConfigResource.broker(resource_name), epoch=epoch)
        return self.schema.describe_broker_configs(
            resource_name, static_config=self.static_config, cluster_configs=self.cluster_config(epoch=epoch),
            node_configs=node, keys=keys or None, include_synonyms=include_synonyms,
            include_documentation=include_documentation)

    # ------------------------------------------------------------------ writes
    def incremental_alter_configs(
            self, config_changes: Mapping[ConfigResource, Mapping[str, tuple[AlterConfigOp, str | None]]],
            new_topic: bool) -> ControllerResult[dict[ConfigResource, ApiError]]:
        """IncrementalAlterConfigs: per resource, all its key changes or none of them.
        ``new_topic``: the resources are topics being created (no existence check)."""
        records: list[ApiMessageAndVersion] = []
        results: dict[ConfigResource, ApiError] = {}
        for resource, key_to_ops in config_changes.items():
            results[resource] = self._incremental_alter_config_resource(resource, key_to_ops, new_topic, records)
        records.extend(self._clear_elr_records_as_needed(records))
        return ControllerResult.atomic_of(records, results)

    def incremental_alter_config(self, resource: ConfigResource,
                                 key_to_ops: Mapping[str, tuple[AlterConfigOp, str | None]],
                                 new_topic: bool) -> ControllerResult[ApiError]:
        """One resource's IncrementalAlterConfigs (CreateTopics' configs use it, ``new_topic=True``)."""
        records: list[ApiMessageAndVersion] = []
        error = self._incremental_alter_config_resource(resource, key_to_ops, new_topic, records)
        records.extend(self._clear_elr_records_as_needed(records))
        return ControllerResult.atomic_of(records, error)

    def legacy_alter_configs(self, new_configs: Mapping[ConfigResource, Mapping[str, str | None]],
                             new_topic: bool) -> ControllerResult[dict[ConfigResource, ApiError]]:
        """The legacy AlterConfigs: each resource's configs become exactly ``new_configs[resource]``
        (keys left out are deleted)."""
        records: list[ApiMessageAndVersion] = []
        results: dict[ConfigResource, ApiError] = {}
        for resource, configs in new_configs.items():
            results[resource] = self._legacy_alter_config_resource(resource, configs, new_topic, records)
        records.extend(self._clear_elr_records_as_needed(records))
        return ControllerResult.atomic_of(records, results)

    def _incremental_alter_config_resource(self, resource: ConfigResource,
                                           key_to_ops: Mapping[str, tuple[AlterConfigOp, str | None]],
                                           new_topic: bool, output: list[ApiMessageAndVersion]) -> ApiError:
        current = self.configs(resource)
        new_records: list[ApiMessageAndVersion] = []
        for key, (op_code, op_value) in key_to_ops.items():
            op = AlterConfigOp.for_id(int(op_code))
            if op is None:
                return ApiError(Errors.INVALID_REQUEST, f"Unknown operations type {op_code}")
            current_value = current.get(key)
            new_value = current_value
            if op is AlterConfigOp.SET:
                new_value = op_value
            elif op is AlterConfigOp.DELETE:
                new_value = None
            else:
                if not self.schema.is_splittable(resource.type, key):
                    return ApiError(Errors.INVALID_CONFIG,
                                    f"Can't {op.name} to key {key} because its type is not LIST.")
                if op_value is None:
                    return ApiError(Errors.INVALID_REQUEST, f"Null value not supported for : {key}")
                parts = self._get_parts(new_value, key, resource)
                for value in java_split(op_value):
                    if op is AlterConfigOp.APPEND:
                        if value not in parts:
                            parts.append(value)
                    elif value in parts:
                        parts.remove(value)
                new_value = ",".join(parts)
            if new_value != current_value or resource.type == ConfigResourceType.BROKER:
                # KAFKA-14136: an unchanged BROKER value is still written, to make brokers reload
                new_records.append(_config_record(resource, key, new_value))
        error = self._validate_alter_config(resource, new_records, [], new_topic)
        if error.error is not Errors.NONE:
            return error
        output.extend(new_records)
        return NONE

    def _legacy_alter_config_resource(self, resource: ConfigResource, new_configs: Mapping[str, str | None],
                                      new_topic: bool, output: list[ApiMessageAndVersion]) -> ApiError:
        current = self.configs(resource)
        explicit = [_config_record(resource, key, value) for key, value in new_configs.items()
                    if current.get(key) != value or resource.type == ConfigResourceType.BROKER]
        implicit = [_config_record(resource, key, None) for key in sorted(current) if key not in new_configs]
        error = self._validate_alter_config(resource, explicit, implicit, new_topic)
        if error.error is not Errors.NONE:
            return error
        output.extend(explicit)
        output.extend(implicit)
        return NONE

    def _get_parts(self, value: str | None, key: str, resource: ConfigResource) -> list[str]:
        """The elements of a LIST value (the key's default when unset); empty elements dropped."""
        if value is None:
            value = self.schema.get_default(resource.type, key)
        if value is None:
            return []
        return [part for part in java_split(value) if part]

    def _validate_alter_config(self, resource: ConfigResource, explicit: Sequence[ApiMessageAndVersion],
                               implicit: Sequence[ApiMessageAndVersion], new_topic: bool) -> ApiError:
        existing = self.configs(resource)
        all_configs: dict[str, str | None] = dict(existing)
        altered: dict[str, str | None] = {}
        for record in explicit:
            rec = record.message
            refused = self._elr_min_isr_refusal(rec)
            if refused is not None:
                return refused
            if rec.value is None:
                all_configs.pop(rec.name, None)
            else:
                all_configs[rec.name] = rec.value
            altered[rec.name] = rec.value
        for record in implicit:
            refused = self._elr_min_isr_refusal(record.message)
            if refused is not None:
                return refused
            all_configs.pop(record.message.name, None)  # KAFKA-14195: not shown to the policy
        try:
            self.validator.validate(resource, all_configs, existing)
            if not new_topic:
                self.existence_checker(resource)
            if self.alter_config_policy is not None:
                self.alter_config_policy(AlterConfigPolicyRequest(resource, altered))
        except ConfigError as exc:
            return ApiError(Errors.INVALID_CONFIG, exc.message)
        except ApiError as exc:
            return exc
        except Exception:
            log.exception("Unknown server error validating Alter Configs of %s", resource)
            return ApiError(Errors.UNKNOWN_SERVER_ERROR)
        return NONE

    # ------------------------------------------------------------------ KIP-966 (ELR)
    def elr_enabled(self) -> bool:
        return self.feature_control is not None and self.feature_control.is_elr_enabled()

    def _elr_min_isr_refusal(self, record: Any) -> ApiError | None:
        """While ELR is on, no named broker may carry ``min.insync.replicas`` and the cluster
        level may not be removed (brokers must agree on which partitions are under min ISR)."""
        if (record.name != MIN_IN_SYNC_REPLICAS_CONFIG or record.resource_type != int(ConfigResourceType.BROKER)
                or not self.elr_enabled()):
            return None
        if record.resource_name != "":
            return DISALLOWED_BROKER_MIN_ISR_TRANSITION_ERROR
        return DISALLOWED_CLUSTER_MIN_ISR_REMOVAL_ERROR if record.value is None else None

    def _clear_elr_records_as_needed(self, records: Sequence[ApiMessageAndVersion]) -> list[ApiMessageAndVersion]:
        if not self.elr_enabled():
            return []
        changes = [r.message for r in records
                   if r.message.API_KEY == m.ConfigRecord.API_KEY and r.message.name == MIN_IN_SYNC_REPLICAS_CONFIG]
        return list(self.min_isr_changed(changes)) if changes else []

    def maybe_generate_elr_safety_records(self, output: list[ApiMessageAndVersion]) -> str:
        """The records that make turning ELR on safe: a cluster-level ``min.insync.replicas``
        (this node's static value) when there is none, and the removal of every broker-level
        one.  Returns the log line ("" when nothing was needed); safe to call with ELR on."""
        parts: list[str] = []
        if MIN_IN_SYNC_REPLICAS_CONFIG not in self.cluster_config():
            min_isr = self.schema.statically_configured_min_insync_replicas(self.static_config)
            output.append(_config_record(DEFAULT_NODE, MIN_IN_SYNC_REPLICAS_CONFIG, str(min_isr)))
            parts.append(f"Generating cluster-level {MIN_IN_SYNC_REPLICAS_CONFIG} of {min_isr}")
        removed = []
        for broker_id in sorted(self._brokers_with_configs.to_set()):
            resource = ConfigResource.broker(str(broker_id))
            if self.config(resource, MIN_IN_SYNC_REPLICAS_CONFIG) is not None:
                output.append(_config_record(resource, MIN_IN_SYNC_REPLICAS_CONFIG, None))
                removed.append(str(broker_id))
        if removed:
            parts.append(f"Removing broker-level {MIN_IN_SYNC_REPLICAS_CONFIG} for brokers: " + ", ".join(removed))
        return ". ".join(parts) + "." if parts else ""

    def update_features(self, updates: Mapping[str, int], upgrade_types: Mapping[str, Any], validate_only: bool,
                        **kwargs: Any) -> ControllerResult[Any]:
        """Kafka's ``ConfigurationControlManager.updateFeatures``: the feature manager's update,
        preceded (in the same atomic batch) by the ELR safety records when it turns ELR on."""
        if self.feature_control is None or not hasattr(self.feature_control, "update_features"):
            raise ValueError("update_features needs a FeatureControlManager (feature_control=)")
        result: ControllerResult[Any] = self.feature_control.update_features(updates, upgrade_types, validate_only,
                                                                            **kwargs)
        succeeded = all(error is None or error.error is Errors.NONE for error in result.response.values())
        if succeeded and not validate_only and updates.get(ELIGIBLE_LEADER_REPLICAS_VERSION.name, 0) > 0:
            records: list[ApiMessageAndVersion] = []
            message = self.maybe_generate_elr_safety_records(records)
            if message:
                log.info("%s", message)
            records.extend(result.records)
            return ControllerResult.atomic_of(records, result.response)
        return result

    # ------------------------------------------------------------------ snapshot
    def snapshot_records(self, epoch: int = LATEST_EPOCH, *,
                         metadata_version: MetadataVersion | None = None) -> Iterator[ApiMessageAndVersion]:
        """One ConfigRecord (version 0, the only one) per key, as Kafka's ConfigurationsImage
        writes them; sorted by resource type id, resource name, key (deterministic bytes).
        ``metadata_version`` changes nothing here; it is accepted so every manager's
        ``snapshot_records`` takes the same arguments."""
        for resource, configs in sorted(self.config_data.items(epoch)):
            for name, value in sorted(configs.items(epoch)):
                yield ApiMessageAndVersion(m.ConfigRecord(resource_type=int(resource.type),
                                                          resource_name=resource.name, name=name, value=value), 0)
