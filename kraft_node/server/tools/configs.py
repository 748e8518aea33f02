"""``kraft-configs``: Kafka's ``kafka-configs.sh`` (ConfigCommand) for topics and brokers.

    kraft-configs --bootstrap-server H:P --entity-type topics [--entity-name T] --describe [--all]
    kraft-configs --bootstrap-server H:P --entity-type brokers [--entity-name N | --entity-default] --describe [--all]
    kraft-configs --bootstrap-server H:P --entity-type topics --entity-name T --alter
                  [--add-config 'k=v,k2=[a,b]'] [--add-config-file F] [--delete-config k,k2]
    (``--topic T``, ``--broker N``, ``--broker-defaults`` are the short forms; ``--bootstrap-controller``
    talks to the controllers, which serve DescribeConfigs and IncrementalAlterConfigs too.)

``--describe`` sends DescribeConfigs (with synonyms) and prints Kafka's block per entity:
``Dynamic configs for topic T are:`` (``All configs ...`` with ``--all``; ``Default configs for
brokers in the cluster are:`` for the defaults) then ``  k=v sensitive=false
synonyms={DYNAMIC_TOPIC_CONFIG:k=v, DEFAULT_CONFIG:k=v}`` per key, by name; without ``--all``
only the keys set at that level.  ``--alter`` sends IncrementalAlterConfigs (SET / DELETE;
Kafka 4's tool does so for brokers too) and prints ``Completed updating config for topic T.``
(``... default config for brokers in the cluster.``).  Deleting a key that is not set fails
with Kafka's ``Invalid config(s): k``.  Argument errors print Kafka's message; a server's
error prints ``Error while executing config command with args '...': <message>``; exit 1.

Other entity types (users, clients, ips, broker-loggers, client-metrics, groups) are refused
by name: kraft's brokers do not serve their APIs yet.
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Sequence

from kraft_node.protocol.generated.describe_configs import DescribeConfigsRequest
from kraft_node.protocol.generated.incremental_alter_configs import IncrementalAlterConfigsRequest
from kraft_node.server.tools.admin import (
    AdminClient,
    AdminError,
    ToolArgumentParser,
    UsageError,
    error_message,
    load_settings,
    run,
    tool_main,
)
from kraft_node.server.tools.metadata_quorum import QuorumToolError, _load_props

PROG = "kraft-configs"
TOPICS, BROKERS = "topics", "brokers"
#: every entity type Kafka's tool knows; kraft serves the first two
KAFKA_ENTITY_TYPES = (TOPICS, "clients", "users", BROKERS, "ips", "broker-loggers", "client-metrics", "groups")
RESOURCE_TYPE = {TOPICS: 2, BROKERS: 4}
#: Kafka's admin ConfigEntry.ConfigSource names by DescribeConfigs' source byte
SOURCE_NAMES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
                4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
                7: "DYNAMIC_CLIENT_METRICS_CONFIG", 8: "DYNAMIC_GROUP_CONFIG"}
SET, DELETE = 0, 1
_TOPIC_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


class ConfigCommandFailed(Exception):
    """A server-side failure: ``Error while executing config command with args '...': <message>``."""


def _parser() -> ToolArgumentParser:
    p = ToolArgumentParser(prog=PROG, description="This tool helps to manipulate and describe entity config for a "
                                                   "topic or broker.")
    p.add_argument("--bootstrap-server", help="The Kafka servers to connect to.")
    p.add_argument("--bootstrap-controller", help="The Kafka controllers to connect to.")
    p.add_argument("--command-config", help="Property file containing configs to be passed to Admin Client.")
    p.add_argument("--alter", action="store_true", help="Alter the configuration for the entity.")
    p.add_argument("--describe", action="store_true", help="List configs for the given entity.")
    p.add_argument("--all", action="store_true", help="List all configs for the given entity, including static "
                                                       "configs if available.")
    p.add_argument("--entity-type", action="append", default=[],
                   help="Type of entity (topics/brokers; Kafka's other types are refused)")
    p.add_argument("--entity-name", action="append", dest="entity_names",
                   help="Name of entity (topic name/broker id)")
    p.add_argument("--entity-default", action="append_const", const="", dest="entity_names",
                   help="Default entity name for brokers")
    p.add_argument("--add-config", help="Key Value pairs of configs to add. Square brackets can be used to group "
                                        "values which contain commas: 'k1=v1,k2=[v1,v2,v2],k3=v3'.")
    p.add_argument("--add-config-file", help="Path to a properties file with configs to add.")
    p.add_argument("--delete-config", action="append", help="config keys to remove 'k1,k2'")
    p.add_argument("--force", action="store_true", help="Suppress console prompts (accepted, nothing to suppress)")
    p.add_argument("--topic", help="The topic's name.")
    p.add_argument("--broker", help="The broker's ID.")
    p.add_argument("--broker-defaults", action="store_true", help="The config defaults for all brokers.")
    for flag in ("client", "user", "broker-logger", "ip", "group", "client-metrics"):
        p.add_argument(f"--{flag}", help=argparse.SUPPRESS)
    for flag in ("client-defaults", "user-defaults", "ip-defaults"):
        p.add_argument(f"--{flag}", action="store_true", help=argparse.SUPPRESS)
    return p


def entity_types_and_names(ns: Any) -> tuple[list[str], list[str]]:
    """Kafka's ``entityTypes``/``entityNames``: the ``--entity-*`` flags, then the specific flags."""
    types = list(ns.entity_type)
    names = list(ns.entity_names or [])
    if ns.topic is not None:
        types.append(TOPICS)
        names.append(ns.topic)
    if ns.broker is not None:
        types.append(BROKERS)
        names.append(ns.broker)
    if ns.broker_defaults:
        types.append(BROKERS)
        names.append("")
    return types, names


def check_args(ns: Any) -> tuple[list[str], list[str]]:
    """Kafka's ``ConfigCommandOptions.checkArgs`` (topics and brokers), its messages."""
    if int(ns.alter) + int(ns.describe) != 1:
        raise UsageError("Command must include exactly one action: --describe, --alter")
    if ns.describe:
        for flag in ("add_config", "delete_config"):
            if getattr(ns, flag):
                raise UsageError(f'Option "[describe]" can\'t be used with option "[{flag.replace("_", "-")}]"')
    for flag in ("client", "user", "broker_logger", "ip", "group", "client_metrics", "client_defaults",
                 "user_defaults", "ip_defaults"):
        if getattr(ns, flag):
            raise AdminError(f"--{flag.replace('_', '-')}: kraft-configs handles topics and brokers only")
    types, names = entity_types_and_names(ns)
    dups = sorted({t for t in types if types.count(t) > 1})
    if dups:
        raise AdminError(f"Duplicate entity type(s) specified: {','.join(dups)}")
    for t in types:
        if t not in KAFKA_ENTITY_TYPES:
            raise AdminError(f"Invalid entity type {t}, the entity type must be one of "
                             f"{', '.join(KAFKA_ENTITY_TYPES)} with a --bootstrap-server or --bootstrap-controller "
                             "argument")
        if t not in RESOURCE_TYPE:
            raise AdminError(f"Entity type {t} is not supported by kraft-configs yet (topics and brokers are)")
    if not types:
        raise AdminError("At least one entity type must be specified")
    if len(types) > 1:
        raise AdminError("Only 'users' and 'clients' entity types may be specified together")
    if (ns.entity_names or ns.entity_type) and (ns.topic is not None or ns.broker is not None or ns.broker_defaults):
        raise AdminError("--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    has_name = any(n for n in names)
    has_default = any(n == "" for n in names)
    if ns.bootstrap_server is None and ns.bootstrap_controller is None:
        raise AdminError("One of the required --bootstrap-server or --bootstrap-controller arguments must be "
                         "specified")
    if ns.bootstrap_server is not None and ns.bootstrap_controller is not None:
        raise AdminError("Only one of --bootstrap-server or --bootstrap-controller can be specified")
    if has_name and types[0] == BROKERS:
        for n in names:
            if n and not _is_int(n):
                raise AdminError(f"The entity name for brokers must be a valid integer broker id, but it is: {n}")
    if ns.describe and types[0] == TOPICS and ns.entity_names and "" in ns.entity_names:
        raise AdminError("--entity-default must not be specified with --describe of topics")
    if ns.alter:
        if types[0] == BROKERS:
            if not has_name and not has_default:
                raise AdminError("An entity-name or default entity must be specified with --alter of users, "
                                 "clients, brokers or ips")
        elif not has_name:
            raise AdminError(f"An entity name must be specified with --alter of {','.join(types)}")
        if ns.add_config is not None and ns.add_config_file is not None:
            raise AdminError("Only one of --add-config or --add-config-file must be specified")
        if ns.add_config is None and ns.add_config_file is None and not ns.delete_config:
            raise AdminError("At least one of --add-config, --add-config-file, or --delete-config must be specified "
                             "with --alter")
        if len(types) != len(names):
            raise AdminError("An entity name must be specified for every entity type")
    return types, names


def _is_int(s: str) -> bool:
    try:
        int(s)
    except ValueError:
        return False
    return True


_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"


def parse_configs_to_add(add_config: str | None, add_config_file: str | None) -> dict[str, str]:
    """``k1=v1,k2=[a,b]`` (commas inside ``[]`` belong to the value, brackets dropped) or a
    properties file; keys of ``[a-zA-Z0-9._-]`` only.  Kafka's messages."""
    props: dict[str, str] = {}
    if add_config_file is not None:
        try:
            props.update(_load_props(add_config_file))
        except QuorumToolError as exc:
            raise AdminError(str(exc)) from None
    if add_config is not None:
        pairs = re.split("," + _OUTSIDE_BRACKETS, add_config)
        while pairs and pairs[-1] == "":  # Java's split drops trailing empty strings
            pairs.pop()
        split = [re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, p) for p in pairs]
        if not all(len(kv) == 2 for kv in split):
            raise AdminError('requirement failed: Invalid entity config: all configs to be added must be in the '
                             'format "key=val".')
        for k, v in split:
            props[k.strip()] = v.replace("[", "").replace("]", "").strip()
    for k in props:
        if not re.fullmatch(r"[a-zA-Z0-9._-]*", k):
            raise AdminError(f"Invalid character found for config key: {k}")
    return props


def parse_configs_to_delete(values: Sequence[str] | None) -> list[str]:
    return [k.strip() for v in values or () for k in v.split(",")]


def validate_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate``."""
    reason = None
    if name == ".":
        reason = "'.' is not allowed"
    elif name == "..":
        reason = "'..' is not allowed"
    elif len(name) > 249:
        reason = f"the length of '{name}' is longer than the max allowed length 249"
    elif not _TOPIC_LEGAL.fullmatch(name):
        reason = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    if reason is not None:
        raise AdminError(f"Topic name is invalid: {reason}")


def _route(entity_type: str, name: str) -> str | int:
    return int(name) if entity_type == BROKERS and name else "any"


async def resource_configs(admin: AdminClient, entity_type: str, name: str, synonyms: bool,
                           describe_all: bool) -> list[Any]:
    """The entity's config entries, by name: all of them, or those set at its own level."""
    if entity_type == TOPICS and name:
        validate_topic_name(name)
    dynamic = 1 if entity_type == TOPICS else (2 if name else 3)
    D = DescribeConfigsRequest
    resource = D.DescribeConfigsResource(resource_type=RESOURCE_TYPE[entity_type], resource_name=name,
                                         configuration_keys=None)
    body = DescribeConfigsRequest(resources=[resource], include_synonyms=synonyms)
    resp = await admin.call(lambda v: body, DescribeConfigsRequest.API_KEY, _route(entity_type, name))
    result = next((r for r in resp.results if r.resource_name == name), None)
    if result is None:
        raise ConfigCommandFailed(f"the DescribeConfigs answer has no result for {entity_type} {name!r}")
    if result.error_code:
        raise ConfigCommandFailed(error_message(result.error_code, result.error_message))
    return sorted((e for e in result.configs if describe_all or e.config_source == dynamic), key=lambda e: e.name)


def _value(v: str | None) -> str:
    return "null" if v is None else v


def entry_line(e: Any) -> str:
    syn = ", ".join(f"{SOURCE_NAMES.get(s.source, 'UNKNOWN')}:{s.name}={_value(s.value)}" for s in e.synonyms)
    return f"  {e.name}={_value(e.value)} sensitive={'true' if e.is_sensitive else 'false'} synonyms={{{syn}}}"


async def describe(admin: AdminClient, entity_type: str, name: str | None, describe_all: bool) -> list[str]:
    if name is not None:
        entities = [name]
    elif entity_type == TOPICS:
        md = await admin.call_metadata(None)
        entities = sorted(t.name for t in md.topics if t.error_code == 0 and t.name)
    else:
        cluster = await admin.describe_cluster()
        entities = [str(b.broker_id) for b in cluster.brokers] + [""]
    out = []
    for entity in entities:
        if entity == "":
            out.append(f"Default configs for {entity_type} in the cluster are:")
        else:
            out.append(f"{'All' if describe_all else 'Dynamic'} configs for {entity_type[:-1]} {entity} are:")
        out.extend(entry_line(e) for e in await resource_configs(admin, entity_type, entity, True, describe_all))
    return out


async def alter(admin: AdminClient, entity_type: str, name: str, to_add: dict[str, str],
                to_delete: list[str]) -> list[str]:
    old = {e.name for e in await resource_configs(admin, entity_type, name, False, False)}
    missing = [k for k in to_delete if k not in old]
    if missing:
        raise AdminError(f"Invalid config(s): {','.join(missing)}")
    Inc = IncrementalAlterConfigsRequest
    ops = [Inc.AlterableConfig(name=k, config_operation=SET, value=v) for k, v in to_add.items()] + \
          [Inc.AlterableConfig(name=k, config_operation=DELETE, value="") for k in to_delete]
    resource = Inc.AlterConfigsResource(resource_type=RESOURCE_TYPE[entity_type], resource_name=name, configs=ops)
    body = IncrementalAlterConfigsRequest(resources=[resource], validate_only=False)
    resp = await admin.call(lambda v: body, IncrementalAlterConfigsRequest.API_KEY, _route(entity_type, name))
    for r in resp.responses:
        if r.error_code:
            raise ConfigCommandFailed(error_message(r.error_code, r.error_message))
    if name:
        return [f"Completed updating config for {entity_type[:-1]} {name}."]
    return [f"Completed updating default config for {entity_type} in the cluster."]


def _main(argv: list[str]) -> int:
    ns = _parser().parse_args(argv)
    types, names = check_args(ns)
    settings = load_settings(ns.bootstrap_server, ns.bootstrap_controller, ns.command_config,
                             lambda s: print(s, file=sys.stderr))
    entity_type = types[0]
    name = names[0] if names else None
    try:
        if ns.alter:
            to_add = parse_configs_to_add(ns.add_config, ns.add_config_file)
            to_delete = parse_configs_to_delete(ns.delete_config)
            assert name is not None
            lines = run(lambda admin: alter(admin, entity_type, name, to_add, to_delete), settings)
        else:
            lines = run(lambda admin: describe(admin, entity_type, name, ns.all), settings)
    except ConfigCommandFailed as exc:
        print(f"Error while executing config command with args '{' '.join(argv)}': {exc}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return tool_main(PROG, argv, _main)


if __name__ == "__main__":
    sys.exit(main())
