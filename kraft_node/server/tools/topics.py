"""``kraft-topics``: Kafka's ``kafka-topics.sh`` against any kraft broker.

    kraft-topics --bootstrap-server H:P --create --topic T [--partitions N] [--replication-factor R]
                 [--config k=v]... [--replica-assignment 1:2,2:3] [--if-not-exists]
    kraft-topics --bootstrap-server H:P --list [--topic REGEX] [--exclude-internal]
    kraft-topics --bootstrap-server H:P --describe [--topic REGEX | --topic-id ID] [--exclude-internal]
                 [--under-replicated-partitions | --unavailable-partitions | --under-min-isr-partitions |
                  --at-min-isr-partitions | --topics-with-overrides] [--if-exists]
    kraft-topics --bootstrap-server H:P --delete --topic REGEX [--if-exists]
    kraft-topics --bootstrap-server H:P --alter --topic REGEX --partitions N [--replica-assignment ...]

Flags, checks, output lines and messages are those of Kafka's ``TopicCommand`` so scripts
written for Kafka's tool read ours: ``Created topic T.``; ``--list`` one name a line, sorted;
``--describe`` a ``Topic: T\\tTopicId: ...\\tPartitionCount: N\\tReplicationFactor: R\\tConfigs: ...``
line and a tab-led line per partition with ``Leader``, ``Replicas``, ``Isr``, ``Elr`` and
``LastKnownElr`` (empty: Metadata carries no ELR); ``--delete`` and ``--alter`` print nothing.
A failed command prints ``Error while executing topic command : <Kafka's message>`` -- on
stderr (Kafka prints it on stdout) -- and exits 1.  Kafka's ``Topic 'Optional[x]' does not
exist as expected`` (a Java ``Optional`` formatted by mistake) reads ``Topic 'x' does not
exist as expected`` here.

``--topic`` is a regular expression except with ``--create``, matched against the whole name
(commas mean "or"), as Kafka's IncludeList.  Metadata v12 lists and describes topics (topic
ids), DescribeConfigs gives the ``Configs:`` column (values not at their default), and
ListPartitionReassignments, when the broker serves it, the ``Adding/Removing Replicas``.
"""
from __future__ import annotations

import re
import sys
from typing import Any, Sequence

from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.create_partitions import CreatePartitionsRequest
from kraft_node.protocol.generated.create_topics import CreateTopicsRequest
from kraft_node.protocol.generated.delete_topics import DeleteTopicsRequest
from kraft_node.protocol.generated.describe_configs import DescribeConfigsRequest
from kraft_node.protocol.generated.list_partition_reassignments import ListPartitionReassignmentsRequest
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
from kraft_storage.messages.runtime import Uuid

PROG = "kraft-topics"
#: Kafka's ``Topic.INTERNAL_TOPICS``: what ``--exclude-internal`` leaves out (besides is_internal).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
TOPIC_RESOURCE = 2
DEFAULT_CONFIG_SOURCE = 5
SHORT_MAX = 32767
_ZERO_UUID = Uuid(bytes(16))
_CONFIGS_HINT = " (To alter topic configurations, the kraft-configs tool can be used.)"
_ACTIONS = ("alter", "create", "describe", "list", "delete")
_REPORTS = ("under_replicated_partitions", "under_min_isr_partitions", "at_min_isr_partitions",
            "unavailable_partitions")


class TopicCommandError(Exception):
    """A failure the tool reports as ``Error while executing topic command : <message>``."""


def main(argv: Sequence[str] | None = None) -> int:
    return tool_main(PROG, argv, _main)


def _parser() -> ToolArgumentParser:
    p = ToolArgumentParser(prog=PROG, description="This tool helps to create, delete, describe, or change a topic.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="REQUIRED: The Kafka server to connect to.")
    p.add_argument("--command-config", metavar="FILE",
                   help="Property file containing configs to be passed to the admin client (security.protocol, "
                        "ssl.*, request.timeout.ms, default.api.timeout.ms).")
    for name, text in (("list", "List all available topics."), ("create", "Create a new topic."),
                       ("delete", "Delete a topic."),
                       ("alter", "Alter the number of partitions and replica assignment." + _CONFIGS_HINT),
                       ("describe", "List details for the given topics.")):
        p.add_argument(f"--{name}", action="store_true", help=text)
    p.add_argument("--topic", help="The topic to create, alter, describe or delete. It also accepts a regular "
                                   "expression, except for --create option.")
    p.add_argument("--topic-id", help="The topic-id to describe.")
    p.add_argument("--config", action="append", metavar="name=value",
                   help="A topic configuration override for the topic being created." + _CONFIGS_HINT)
    p.add_argument("--delete-config", metavar="name", help="No longer supported (removed in Kafka 4.0).")
    p.add_argument("--partitions", type=int, metavar="N",
                   help="The number of partitions for the topic being created or altered.")
    p.add_argument("--replication-factor", type=int, metavar="R",
                   help="The replication factor for each partition in the topic being created.")
    p.add_argument("--replica-assignment", metavar="B1:B2,B3:B4",
                   help="A list of manual partition-to-broker assignments for the topic being created or altered.")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="If set when describing topics, only show under-replicated partitions.")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="If set when describing topics, only show partitions whose leader is not available.")
    p.add_argument("--under-min-isr-partitions", action="store_true",
                   help="If set when describing topics, only show partitions whose isr count is less than the "
                        "configured minimum.")
    p.add_argument("--at-min-isr-partitions", action="store_true",
                   help="If set when describing topics, only show partitions whose isr count is equal to the "
                        "configured minimum.")
    p.add_argument("--topics-with-overrides", action="store_true",
                   help="If set when describing topics, only show topics that have overridden configs.")
    p.add_argument("--if-exists", action="store_true",
                   help="If set when altering or deleting or describing topics, the action will only execute if "
                        "the topic exists.")
    p.add_argument("--if-not-exists", action="store_true",
                   help="If set when creating topics, the action will only execute if the topic does not already "
                        "exist.")
    p.add_argument("--exclude-internal", action="store_true",
                   help="Exclude internal topics when listing or describing topics.")
    p.add_argument("--partition-size-limit-per-response", type=int, metavar="N",
                   help="Accepted for compatibility; kraft-topics describes with Metadata, which is not paged.")
    return p


def _opt(name: str) -> str:
    """An option as Kafka's joptsimple prints it in messages: ``[topic]``."""
    return f"[{name.replace('_', '-')}]"


def _given(ns: Any, name: str) -> bool:
    v = getattr(ns, name)
    return v not in (None, False)


def _check_invalid(ns: Any, used: str, invalid: Sequence[str]) -> None:
    if _given(ns, used):
        for other in invalid:
            if _given(ns, other):
                raise UsageError(f'Option "{_opt(used)}" can\'t be used with option "{_opt(other)}"')


def _all_but(*keep: str, extra: Sequence[str] = ()) -> list[str]:
    return [a for a in _ACTIONS if a not in keep] + list(extra)


def check_args(ns: Any) -> None:
    """Kafka's ``TopicCommandOptions.checkArgs``, in its order and with its messages."""
    if sum(1 for a in _ACTIONS if getattr(ns, a)) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --create, --alter or --delete")
    if ns.delete_config is not None:
        print("delete-config option is no longer supported and deprecated since version 4.0. The config will be "
              "fully removed in future releases.", file=sys.stderr)
    if ns.bootstrap_server is None:
        raise AdminError("--bootstrap-server must be specified")
    if ns.describe and ns.if_exists:
        if ns.topic is None and ns.topic_id is None:
            raise UsageError("--topic or --topic-id is required to describe a topic")
        if ns.topic is not None and ns.topic_id is not None:
            print("Only topic id will be used when both --topic and --topic-id are specified and topicId is not "
                  "Uuid.ZERO_UUID")
    if not ns.list and not ns.describe and ns.topic is None:
        raise UsageError(f'Missing required argument "{_opt("topic")}"')
    if ns.alter:
        if ns.config:
            raise UsageError(f'Option combination "[{_opt("bootstrap-server")}, {_opt("config")}]" can\'t be used '
                             f'with option "{_opt("alter")}"{_CONFIGS_HINT}')
        if ns.partitions is None:
            raise UsageError(f'Missing required argument "{_opt("partitions")}"')
    _check_invalid(ns, "config", _all_but("alter", "create"))
    _check_invalid(ns, "partitions", _all_but("alter", "create"))
    _check_invalid(ns, "replication_factor", _all_but("create"))
    _check_invalid(ns, "replica_assignment", _all_but("alter", "create"))
    if ns.create:
        _check_invalid(ns, "replica_assignment", ["partitions", "replication_factor"])
    for report in _REPORTS:
        _check_invalid(ns, report, _all_but("describe", extra=["topics_with_overrides"]))
    _check_invalid(ns, "topics_with_overrides", _all_but("describe", extra=list(_REPORTS)))
    _check_invalid(ns, "if_exists", _all_but("alter", "delete", "describe"))
    _check_invalid(ns, "if_not_exists", _all_but("create"))
    _check_invalid(ns, "exclude_internal", _all_but("list", "describe"))


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """``"1:2,2:3"`` -> ``{0: [1, 2], 1: [2, 3]}``; Kafka's messages for duplicates within a
    partition and for partitions of different sizes."""
    out: dict[int, list[int]] = {}
    for i, part in enumerate(text.split(",")):
        brokers = []
        for b in part.split(":"):
            b = b.strip()
            try:
                brokers.append(int(b))
            except ValueError:
                raise TopicCommandError(f'For input string: "{b}"') from None
        dups = sorted({b for b in brokers if brokers.count(b) > 1})
        if dups:
            raise TopicCommandError("Partition replica lists may not contain duplicate entries: "
                                    + ",".join(str(d) for d in dups))
        out[i] = brokers
        if len(brokers) != len(out[0]):
            raise TopicCommandError(f"Partition {i} has different replication factor: "
                                    f"[{', '.join(str(b) for b in brokers)}]")
    return out


def parse_topic_configs(pairs: Sequence[str] | None) -> dict[str, str]:
    """``--config k=v`` values (Kafka splits on ``=`` with the spaces around it)."""
    out: dict[str, str] = {}
    for s in pairs or ():
        parts = re.split(r"\s*=\s*", s)
        while parts and parts[-1] == "":  # Java's split drops trailing empty strings
            parts.pop()
        if len(parts) != 2:
            raise TopicCommandError('requirement failed: Invalid topic config: all configs to be added must be in '
                                    'the format "key=val".')
        out[parts[0].strip()] = parts[1].strip()
    return out


def topic_filter(raw: str) -> re.Pattern[str]:
    """Kafka's TopicFilter: commas are alternatives, spaces and surrounding quotes dropped."""
    regex = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", raw.strip().replace(",", "|").replace(" ", "")))
    try:
        return re.compile(regex)
    except re.error:
        raise TopicCommandError(f"{regex} is an invalid regex.") from None


def _is_internal(topic: Any) -> bool:
    return bool(topic.is_internal) or topic.name in INTERNAL_TOPICS


def select_topics(metadata: Any, pattern: str | None, exclude_internal: bool) -> list[Any]:
    """The Metadata topics (no error) whose names match ``pattern``, sorted by name."""
    topics = sorted((t for t in metadata.topics if t.error_code == 0 and t.name), key=lambda t: t.name)
    rx = topic_filter(pattern) if pattern is not None else None
    return [t for t in topics if (rx is None or rx.fullmatch(t.name)) and not (exclude_internal and _is_internal(t))]


def _ensure_exists(found: Sequence[Any], topic: str | None, required: bool) -> None:
    if topic and required and not found:
        raise TopicCommandError(f"Topic '{topic}' does not exist as expected")


def _raise_for(code: int, message: str | None) -> None:
    if code:
        raise AdminError(error_message(code, message), code)


# ---------------------------------------------------------------------- the commands
async def create_topic(admin: AdminClient, ns: Any) -> list[str]:
    name = ns.topic
    out: list[str] = []
    if "." in name or "_" in name:  # printed at once, as Kafka does, even if the create then fails
        print("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') "
              "could collide. To avoid issues it is best to use either, but not both.")
    rf, partitions = ns.replication_factor, ns.partitions
    if rf is not None and not 1 <= rf <= SHORT_MAX:
        raise TopicCommandError(f"The replication factor must be between 1 and {SHORT_MAX} inclusive")
    if partitions is not None and partitions < 1:
        raise TopicCommandError("The partitions must be greater than 0")
    assignment = parse_replica_assignment(ns.replica_assignment) if ns.replica_assignment else {}
    configs = parse_topic_configs(ns.config)
    C = CreateTopicsRequest
    topic = C.CreatableTopic(
        name=name, num_partitions=-1 if assignment or partitions is None else partitions,
        replication_factor=-1 if assignment or rf is None else rf,
        assignments=[C.CreatableReplicaAssignment(partition_index=i, broker_ids=b) for i, b in assignment.items()],
        configs=[C.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])
    timeout_ms = int(admin.settings.request_timeout_s * 1000)
    resp = await admin.call(lambda v: CreateTopicsRequest(topics=[topic], timeout_ms=timeout_ms, validate_only=False),
                            CreateTopicsRequest.API_KEY, "controller", lambda r: [t.error_code for t in r.topics])
    result = next((t for t in resp.topics if t.name == name), None)
    if result is None:
        raise AdminError(f"the CreateTopics answer has no result for topic {name!r}")
    if result.error_code == Errors.TOPIC_ALREADY_EXISTS and ns.if_not_exists:
        return out
    _raise_for(result.error_code, result.error_message)
    out.append(f"Created topic {name}.")
    return out


async def list_topics(admin: AdminClient, ns: Any) -> list[str]:
    md = await admin.call_metadata(None)
    return ["\n".join(t.name for t in select_topics(md, ns.topic, ns.exclude_internal))]


async def delete_topics(admin: AdminClient, ns: Any) -> list[str]:
    md = await admin.call_metadata(None)
    topics = select_topics(md, ns.topic, ns.exclude_internal)
    _ensure_exists(topics, ns.topic, not ns.if_exists)
    if not topics:
        return []
    names = [t.name for t in topics]
    timeout_ms = int(admin.settings.request_timeout_s * 1000)

    def make(version: int) -> Any:
        if version >= 6:
            return DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=n) for n in names],
                                       timeout_ms=timeout_ms)
        return DeleteTopicsRequest(topic_names=names, timeout_ms=timeout_ms)

    resp = await admin.call(make, DeleteTopicsRequest.API_KEY, "controller",
                            lambda r: [t.error_code for t in r.responses])
    for r in sorted(resp.responses, key=lambda r: r.name or ""):
        _raise_for(r.error_code, r.error_message)
    return []


async def alter_topics(admin: AdminClient, ns: Any) -> list[str]:
    assignment = parse_replica_assignment(ns.replica_assignment) if ns.replica_assignment else {}
    md = await admin.call_metadata(None)
    topics = select_topics(md, ns.topic, ns.exclude_internal)
    _ensure_exists(topics, ns.topic, not ns.if_exists)
    if not topics:
        return []
    P = CreatePartitionsRequest
    entries = []
    for t in topics:
        new = [b for i, b in assignment.items() if i >= len(t.partitions)] if assignment else None
        entries.append(P.CreatePartitionsTopic(
            name=t.name, count=ns.partitions,
            assignments=None if new is None else [P.CreatePartitionsAssignment(broker_ids=b) for b in new]))
    timeout_ms = int(admin.settings.request_timeout_s * 1000)
    body = CreatePartitionsRequest(topics=entries, timeout_ms=timeout_ms, validate_only=False)
    resp = await admin.call(lambda v: body, CreatePartitionsRequest.API_KEY, "controller",
                            lambda r: [x.error_code for x in r.results])
    for r in sorted(resp.results, key=lambda r: r.name):
        _raise_for(r.error_code, r.error_message)
    return []


async def _topic_configs(admin: AdminClient, names: Sequence[str]) -> dict[str, list[Any]]:
    if not names:
        return {}
    D = DescribeConfigsRequest
    body = DescribeConfigsRequest(resources=[D.DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=n,
                                                                       configuration_keys=None) for n in names],
                                  include_synonyms=False)
    resp = await admin.call(lambda v: body,
                            DescribeConfigsRequest.API_KEY, "any")
    out = {}
    for r in resp.results:
        _raise_for(r.error_code, r.error_message)
        out[r.resource_name] = list(r.configs)
    return out


async def _reassignments(admin: AdminClient, topics: Sequence[Any]) -> dict[tuple[str, int], Any]:
    """Ongoing reassignments of these partitions, or none when the cluster cannot say (Kafka
    ignores UnsupportedVersion there too)."""
    peer = await admin.bootstrap()
    if int(ListPartitionReassignmentsRequest.API_KEY) not in peer.versions or not topics:
        return {}
    L = ListPartitionReassignmentsRequest
    body = ListPartitionReassignmentsRequest(timeout_ms=int(admin.settings.request_timeout_s * 1000),
             topics=[L.ListPartitionReassignmentsTopics(name=t.name,
                                                        partition_indexes=[p.partition_index for p in t.partitions])
                     for t in topics])
    try:
        resp = await admin.call(lambda v: body, ListPartitionReassignmentsRequest.API_KEY, "controller")
    except AdminError:
        return {}
    if resp.error_code:
        return {}
    return {(t.name, p.partition_index): p for t in resp.topics for p in t.partitions}


def _ids(xs: Sequence[int]) -> str:
    return ",".join(str(x) for x in xs)


async def describe_topics(admin: AdminClient, ns: Any) -> list[str]:
    md = await admin.call_metadata(None)
    topic_id = None
    if ns.topic_id is not None:
        try:
            topic_id = Uuid(ns.topic_id)
        except (ValueError, TypeError):
            raise TopicCommandError(f"Invalid topic id: {ns.topic_id}") from None
        if topic_id == _ZERO_UUID:
            topic_id = None
    if topic_id is not None:
        topics = [t for t in select_topics(md, None, ns.exclude_internal) if t.topic_id == topic_id]
        if not topics and not ns.if_exists:
            raise TopicCommandError(f"TopicId '{topic_id}' does not exist as expected")
    else:
        topics = select_topics(md, ns.topic, ns.exclude_internal)
        _ensure_exists(topics, ns.topic, not ns.if_exists)
    configs = await _topic_configs(admin, [t.name for t in topics])
    live = {b.node_id for b in md.brokers}
    reassignments = await _reassignments(admin, topics)
    report = any(getattr(ns, r) for r in _REPORTS)
    out: list[str] = []
    for t in topics:
        entries = configs.get(t.name, [])
        parts = sorted(t.partitions, key=lambda p: p.partition_index)
        if not report and parts:
            overrides = [e for e in entries if e.config_source != DEFAULT_CONFIG_SOURCE]
            if not ns.topics_with_overrides or overrides:
                first = parts[0]
                ra = reassignments.get((t.name, first.partition_index))
                line = f"Topic: {t.name}"
                if t.topic_id != _ZERO_UUID:
                    line += f"\tTopicId: {t.topic_id}"
                line += (f"\tPartitionCount: {len(parts)}\tReplicationFactor: {_replication_factor(first, ra)}"
                         f"\tConfigs: {','.join(f'{e.name}={e.value}' for e in overrides)}")
                out.append(line)
        if ns.topics_with_overrides:
            continue
        min_isr = next((e.value for e in entries if e.name == "min.insync.replicas"), None)
        for p in parts:
            ra = reassignments.get((t.name, p.partition_index))
            if report and not _reported(ns, p, ra, min_isr, live):
                continue
            out.append(_partition_line(t.name, p, ra))
    return out


def _in_reassignment(p: Any, ra: Any) -> bool:
    if ra is None:
        return False
    changing = set(ra.adding_replicas) | set(ra.removing_replicas)
    return any(r in changing for r in p.replica_nodes)


def _replication_factor(p: Any, ra: Any) -> int:
    if _in_reassignment(p, ra):
        return len(ra.replicas) - len(ra.adding_replicas)
    return len(p.replica_nodes)


def _reported(ns: Any, p: Any, ra: Any, min_isr: str | None, live: set[int]) -> bool:
    has_leader = p.leader_id >= 0
    isr = len(p.isr_nodes)
    try:
        min_count = int(min_isr) if min_isr is not None else 1
    except ValueError:
        min_count = 1
    return bool((ns.under_replicated_partitions and _replication_factor(p, ra) - isr > 0)
                or (ns.unavailable_partitions and (not has_leader or p.leader_id not in live))
                or (ns.under_min_isr_partitions and (not has_leader or isr < min_count))
                or (ns.at_min_isr_partitions and isr == min_count))


def _partition_line(topic: str, p: Any, ra: Any) -> str:
    leader = str(p.leader_id) if p.leader_id >= 0 else "none"
    line = (f"\tTopic: {topic}\tPartition: {p.partition_index}\tLeader: {leader}"
            f"\tReplicas: {_ids(p.replica_nodes)}\tIsr: {_ids(p.isr_nodes)}")
    if ra is not None:
        line += f"\tAdding Replicas: {_ids(ra.adding_replicas)}\tRemoving Replicas: {_ids(ra.removing_replicas)}"
    # Metadata carries no ELR: Kafka's admin client then reports empty lists
    return line + "\tElr: \tLastKnownElr: "


_COMMANDS = {"create": create_topic, "list": list_topics, "describe": describe_topics, "delete": delete_topics,
             "alter": alter_topics}


def _main(argv: list[str]) -> int:
    if not argv:
        raise UsageError("Create, delete, describe, or change a topic.")
    ns = _parser().parse_args(argv)
    try:
        check_args(ns)
    except AdminError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    try:
        settings = load_settings(ns.bootstrap_server, None, ns.command_config, lambda s: print(s, file=sys.stderr))
        action = next(a for a in _ACTIONS if getattr(ns, a))
        lines = run(lambda admin: _COMMANDS[action](admin, ns), settings)
    except (AdminError, TopicCommandError) as exc:
        print(f"Error while executing topic command : {exc}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
