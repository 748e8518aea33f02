"""The checks the controller makes on every config change (Kafka's ``ConfigurationValidator``
and its KRaft implementation ``ControllerConfigurationValidator``), which no AlterConfigPolicy
can bypass.

* TOPIC: the name is a legal topic name (never ``""``), no key is given without a value, and the
  resulting override set passes ``LogConfig.validate`` over the node's static log config;
* BROKER: the name is ``""`` (cluster default) or a non-negative base-10 id (keys and values
  were checked by the broker that forwarded the request: configs/broker.py);
* CLIENT_METRICS: Kafka's ``ClientMetricsConfigs.validate``;
* GROUP: refused, naming the resource: kraft has no group coordinator configs yet;
* anything else: "Unknown resource type X".

Errors are ApiError with Kafka's code and text, or :class:`ConfigError` (answered INVALID_CONFIG).
"""
from __future__ import annotations

import re
from typing import Mapping, Protocol

from kraft_node.metadata.configs.resources import ConfigResource, ConfigResourceType
from kraft_node.metadata.configs.topic import (
    check_no_null_topic_configs,
    extract_log_config_map,
    validate_topic_configs,
    validate_topic_name,
)
from kraft_node.metadata.configs.types import ConfigDef, ConfigType, java_split, parse_java_boolean
from kraft_node.metadata.controller.errors import ApiError
from kraft_node.protocol.errors import Errors

__all__ = ["ConfigurationValidator", "NoOpConfigurationValidator", "NO_OP_VALIDATOR",
           "ControllerConfigurationValidator", "validate_client_metrics_configs", "CLIENT_METRICS_CONFIG_DEF"]


class ConfigurationValidator(Protocol):
    """Kafka's ``ConfigurationValidator``: each method raises ApiError/ConfigError to refuse."""

    def validate_resource(self, resource: ConfigResource) -> None:
        """May ``resource`` be described?"""

    def validate(self, resource: ConfigResource, new_configs: Mapping[str, str | None],
                 existing_configs: Mapping[str, str]) -> None:
        """May ``resource`` end up with ``new_configs`` (its whole dynamic config after the change)?"""


class NoOpConfigurationValidator:
    """``ConfigurationValidator.NO_OP``: accepts everything (Kafka's unit tests use it)."""

    def validate_resource(self, resource: ConfigResource) -> None:
        return None

    def validate(self, resource: ConfigResource, new_configs: Mapping[str, str | None],
                 existing_configs: Mapping[str, str]) -> None:
        return None


NO_OP_VALIDATOR = NoOpConfigurationValidator()

#: ClientMetricsConfigs' ConfigDef.
CLIENT_METRICS_CONFIG_DEF = (ConfigDef()
                             .define("metrics", ConfigType.LIST, (), None, "Subscribed metric name prefixes.")
                             .define("interval.ms", ConfigType.INT, 5 * 60 * 1000, None, "Push interval.")
                             .define("match", ConfigType.LIST, (), None, "Client matching patterns."))
_CLIENT_MATCH_PARAMS = frozenset({"client_instance_id", "client_id", "client_software_name",
                                  "client_software_version", "client_source_address", "client_source_port"})


def validate_client_metrics_configs(subscription_name: str, props: Mapping[str, str]) -> None:
    """``ClientMetricsConfigs.validate``.  Match patterns are compiled with Python's ``re``
    (Kafka uses java.util.regex: the common syntax is the same)."""
    if not subscription_name:
        raise ApiError(Errors.INVALID_REQUEST, "Subscription name can't be empty")
    for key in props:
        if key not in CLIENT_METRICS_CONFIG_DEF:
            raise ApiError(Errors.INVALID_REQUEST, f"Unknown client metrics configuration: {key}")
    parsed = CLIENT_METRICS_CONFIG_DEF.parse(props)
    if "interval.ms" in props:
        interval = parsed["interval.ms"]
        if not 100 <= interval <= 3_600_000:
            raise ApiError(Errors.INVALID_REQUEST, f"Invalid value {interval} for interval.ms, interval must be "
                                                   "between 100 and 3600000 (1 hour)")
    if "match" in props:
        for pattern in parsed["match"]:
            pair = java_split(pattern, "=")
            if len(pair) != 2 or pair[0].strip() not in _CLIENT_MATCH_PARAMS:
                raise ApiError(Errors.INVALID_CONFIG, f"Illegal client matching pattern: {pattern}")
            try:
                re.compile(pair[1].strip())
            except re.error:
                raise ApiError(Errors.INVALID_CONFIG, f"Illegal client matching pattern: {pattern}") from None


def _validate_topic_resource_name(name: str) -> None:
    if name == "":
        raise ApiError(Errors.INVALID_REQUEST, "Default topic resources are not allowed.")
    validate_topic_name(name)


def _validate_broker_resource_name(name: str) -> None:
    if name == "":
        return
    if not re.fullmatch(r"[+-]?[0-9]+", name) or not -(2 ** 31) <= int(name) < 2 ** 31:
        raise ApiError(Errors.INVALID_REQUEST, "Unable to parse broker name as a base 10 number.")
    if int(name) < 0:
        raise ApiError(Errors.INVALID_REQUEST, "Invalid negative broker ID.")


def _unknown_type(resource: ConfigResource) -> ApiError:
    return ApiError(Errors.INVALID_REQUEST, f"Unknown resource type {resource.type.name}")


class ControllerConfigurationValidator:
    """The KRaft controller's validator, built from the node's static config (the log defaults
    topic values are validated over, and ``remote.log.storage.system.enable``)."""

    def __init__(self, static_config: Mapping[str, str] | None = None):
        static = dict(static_config or {})
        self.static_log_config = extract_log_config_map(static)
        self.remote_storage_system_enabled = bool(
            parse_java_boolean(static.get("remote.log.storage.system.enable", "false")))

    def validate_resource(self, resource: ConfigResource) -> None:
        if resource.type is ConfigResourceType.TOPIC:
            _validate_topic_resource_name(resource.name)
        elif resource.type is ConfigResourceType.BROKER:
            _validate_broker_resource_name(resource.name)
        else:
            raise _unknown_type(resource)

    def validate(self, resource: ConfigResource, new_configs: Mapping[str, str | None],
                 existing_configs: Mapping[str, str]) -> None:
        if resource.type is ConfigResourceType.TOPIC:
            _validate_topic_resource_name(resource.name)
            check_no_null_topic_configs(sorted(new_configs.items()))
            props = {k: v for k, v in new_configs.items() if v is not None}
            validate_topic_configs(props, existing_configs=existing_configs, static_log_config=self.static_log_config,
                                   remote_storage_system_enabled=self.remote_storage_system_enabled)
        elif resource.type is ConfigResourceType.BROKER:
            _validate_broker_resource_name(resource.name)
        elif resource.type is ConfigResourceType.CLIENT_METRICS:
            validate_client_metrics_configs(resource.name, {k: v for k, v in new_configs.items() if v is not None})
        elif resource.type is ConfigResourceType.GROUP:
            raise ApiError(Errors.INVALID_REQUEST, f"Group configs are not supported by kraft yet: cannot alter "
                                                   f"{resource}")
        else:
            raise _unknown_type(resource)
