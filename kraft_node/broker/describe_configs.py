"""DescribeConfigs on a broker, from one metadata image (Kafka's ``ConfigHelper.describeConfigs``).

Why here and not the controller's handler: the controller answers through its own
``ConfigurationControlManager`` at a committed offset; a broker has no controller state, only
the image.  Both resolve values with the same :data:`KAFKA_CONFIG_SCHEMA` (imported, not
copied), so a key's value, source and synonyms agree wherever it is described:

    topic:  DYNAMIC_TOPIC_CONFIG > DYNAMIC_BROKER_CONFIG (BROKER "<this id>")
            > DYNAMIC_DEFAULT_BROKER_CONFIG (BROKER "") > STATIC_BROKER_CONFIG > DEFAULT_CONFIG
    broker: "" lists the cluster-level dynamic keys; "<this id>" every key (node dynamic >
            cluster dynamic > static > default); another broker's id is INVALID_REQUEST with
            Kafka's message (a broker describes only itself).

Resource errors, Kafka's: an invalid topic name INVALID_TOPIC_EXCEPTION with the reason, a
topic not in the image UNKNOWN_TOPIC_OR_PARTITION (no message), an unknown resource type
INVALID_REQUEST.  Not implemented, and refused by name with INVALID_REQUEST: BROKER_LOGGER
(kraft has no log4j loggers to list) and GROUP (group configs need the group coordinator).
CLIENT_METRICS lists the stored entries, as Kafka does.  Sensitive values are null.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kraft_node.metadata.configs.resources import ConfigResource, ConfigResourceType
from kraft_node.metadata.configs.schema import KAFKA_CONFIG_SCHEMA, ConfigEntry, ConfigSource
from kraft_node.metadata.controller.errors import ApiError
from kraft_node.metadata.controller.topic_creation import validate_topic_name
from kraft_node.metadata.image.metadata_image import MetadataImage
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.describe_configs import DescribeConfigsResponse

__all__ = ["describe_configs", "describe_resource"]

_R = DescribeConfigsResponse


def describe_resource(image: MetadataImage, rtype: int, name: str, keys: list[str] | None, *, node_id: int,
                      static_config: Mapping[str, str], include_synonyms: bool = False,
                      include_documentation: bool = False) -> list[ConfigEntry]:
    """The entries of one resource (ApiError for a resource that cannot be described)."""
    configs = image.configs
    cluster = configs.config_map_for_resource(ConfigResource.broker(""))
    node = configs.config_map_for_resource(ConfigResource.broker(str(node_id)))
    if rtype == ConfigResourceType.TOPIC:
        validate_topic_name(name)
        if image.topics.get_topic_by_name(name) is None:
            raise ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        entries = KAFKA_CONFIG_SCHEMA.resolve_effective_topic_configs(
            static_config, cluster, node, configs.config_map_for_resource(ConfigResource.topic(name)),
            include_synonyms=include_synonyms)
        wanted = sorted(entries) if not keys else [k for k in keys if k in entries]
        out = []
        for key in wanted:
            entry = entries[key]
            if not include_documentation and entry.documentation is not None:
                entry = ConfigEntry(entry.name, entry.value, entry.source, entry.is_sensitive, entry.is_read_only,
                                    entry.type, None, entry.synonyms)
            out.append(entry)
        return out
    if rtype == ConfigResourceType.BROKER:
        if name and _broker_id(name) != node_id:
            raise ApiError(Errors.INVALID_REQUEST,
                           f"Unexpected broker id, expected {node_id} or empty string, but received {name}")
        return KAFKA_CONFIG_SCHEMA.describe_broker_configs(
            name, static_config=static_config, cluster_configs=cluster, node_configs=node if name else {},
            keys=keys or None, include_synonyms=include_synonyms, include_documentation=include_documentation)
    if rtype == ConfigResourceType.CLIENT_METRICS:
        if not name:
            raise ApiError(Errors.INVALID_REQUEST, "Client metrics subscription name must not be empty")
        stored = configs.config_map_for_resource(ConfigResource(ConfigResourceType.CLIENT_METRICS, name))
        return [ConfigEntry(k, v, ConfigSource.CLIENT_METRICS_CONFIG) for k, v in sorted(stored.items())
                if not keys or k in keys]
    if rtype == ConfigResourceType.BROKER_LOGGER:
        raise ApiError(Errors.INVALID_REQUEST, "kraft does not describe BROKER_LOGGER resources (no log4j loggers)")
    if rtype == ConfigResourceType.GROUP:
        raise ApiError(Errors.INVALID_REQUEST, "kraft does not describe GROUP configs (no group coordinator)")
    raise ApiError(Errors.INVALID_REQUEST, f"Unexpected resource type {rtype} for resource {name}")


def _broker_id(name: str) -> int:
    try:
        return int(name)
    except ValueError:
        raise ApiError(Errors.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}") from None


def describe_configs(image: MetadataImage, request: Any, version: int, *, node_id: int,
                     static_config: Mapping[str, str]) -> DescribeConfigsResponse:
    """The DescribeConfigsResponse for ``request`` (synonyms v1+, documentation v3+)."""
    synonyms = version >= 1 and bool(request.include_synonyms)
    docs = version >= 3 and bool(request.include_documentation)
    results = []
    for res in request.resources:
        keys = list(res.configuration_keys) if res.configuration_keys else None
        try:
            entries = describe_resource(image, int(res.resource_type), res.resource_name, keys, node_id=node_id,
                                        static_config=static_config, include_synonyms=synonyms,
                                        include_documentation=docs)
        except ApiError as exc:
            results.append(_R.DescribeConfigsResult(error_code=int(exc.error), error_message=exc.message,
                                                    resource_type=res.resource_type, resource_name=res.resource_name,
                                                    configs=[]))
            continue
        results.append(_R.DescribeConfigsResult(
            error_code=0, error_message=None, resource_type=res.resource_type, resource_name=res.resource_name,
            configs=[_R.DescribeConfigsResourceResult(
                name=e.name, value=e.describe_value, read_only=e.is_read_only, config_source=int(e.source),
                is_sensitive=e.is_sensitive, config_type=e.describe_type_id,
                documentation=e.documentation if docs else None,
                synonyms=[_R.DescribeConfigsSynonym(name=s.name, value=s.value, source=int(s.source))
                          for s in e.synonyms] if synonyms else [])
                for e in entries]))
    return _R(throttle_time_ms=0, results=results)
