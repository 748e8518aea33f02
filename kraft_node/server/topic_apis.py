"""The controller's RPCs for topics, partitions and configs (the rest of Kafka's
``ControllerApis``): CreateTopics, DeleteTopics, CreatePartitions, AlterPartition,
ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments,
IncrementalAlterConfigs, AlterConfigs and DescribeConfigs.

Same shape as :mod:`kraft_node.server.controller_apis`: decode nothing, call one public
method of the QuorumController, answer from the future's done callback (``DEFERRED``).
What the RPC layer itself decides, as Kafka's ``ControllerApis`` does before calling the
controller:

* duplicates in a request are answered here with INVALID_REQUEST ("Duplicate topic name.",
  "Duplicate resource.", "Duplicate topic id.") and never reach the controller;
* ``__cluster_metadata`` cannot be created ("Creation of internal topic __cluster_metadata
  is prohibited.");
* DeleteTopics accepts names and ids (both in one entry is INVALID_REQUEST "You may not
  specify both topic name and topic id."), resolves names at the committed offset, then
  deletes by id; a name that maps to an id also given is INVALID_REQUEST;
* an unknown config resource type is UNSUPPORTED_VERSION "Unknown resource type N.".
* a failure of the whole call (NOT_CONTROLLER, a timeout) gives every entry that code, as
  Kafka's ``getErrorResponse``.

Decision (authorization): kraft has no authorizer yet (SASL and ACLs come later), so every
principal may do everything -- Kafka's behaviour with no ``authorizer.class.name``. The
``describable`` set passed to CreateTopics is every requested name.  Decision (ordering):
Kafka shuffles DeleteTopics results so that their positions reveal nothing; without
authorization there is nothing to hide, so kraft keeps request order (deterministic for
tests and tools).

Request deadlines: ``timeout_ms`` of CreateTopics, DeleteTopics, CreatePartitions,
ElectLeaders and the reassignment RPCs bounds how long the event may wait in the queue
(Kafka's ``requestTimeoutMsToDeadlineNs``); a request that waits longer gets
REQUEST_TIMED_OUT.
"""
from __future__ import annotations

from typing import Any, Callable

from kraft_node.metadata.controller.configuration_control import AlterConfigOp, ConfigResource, ConfigResourceType
from kraft_node.metadata.controller.errors import ApiError
from kraft_node.metadata.controller.quorum_controller import ControllerFuture
from kraft_node.network.server import RequestContext
from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.alter_configs import AlterConfigsResponse
from kraft_node.protocol.generated.alter_partition import AlterPartitionResponse
from kraft_node.protocol.generated.alter_partition_reassignments import AlterPartitionReassignmentsResponse
from kraft_node.protocol.generated.create_partitions import CreatePartitionsResponse
from kraft_node.protocol.generated.create_topics import CreateTopicsResponse
from kraft_node.protocol.generated.delete_topics import DeleteTopicsResponse
from kraft_node.protocol.generated.describe_configs import DescribeConfigsResponse
from kraft_node.protocol.generated.elect_leaders import ElectLeadersResponse
from kraft_node.protocol.generated.incremental_alter_configs import IncrementalAlterConfigsResponse
from kraft_node.protocol.generated.list_partition_reassignments import ListPartitionReassignmentsResponse
from kraft_node.server.controller_apis import answer_when_done
from kraft_storage.messages.runtime import ZERO_UUID, Uuid

__all__ = ["TopicApis"]

CLUSTER_METADATA_TOPIC = "__cluster_metadata"


class TopicApis:
    """Handlers for the node's routing table (:meth:`handlers`); ``controller`` is the
    node's QuorumController, ``clock_ns`` the controller queue's clock."""

    def __init__(self, controller: Any, *, node_id: int, clock_ns: Callable[[], int]) -> None:
        self.controller = controller
        self.node_id = node_id
        self.clock_ns = clock_ns

    def handlers(self) -> dict[int, Callable[[RequestContext, Any], Any]]:
        return {
            int(ApiKeys.CREATE_TOPICS): self.handle_create_topics,
            int(ApiKeys.DELETE_TOPICS): self.handle_delete_topics,
            int(ApiKeys.CREATE_PARTITIONS): self.handle_create_partitions,
            int(ApiKeys.ALTER_PARTITION): self.handle_alter_partition,
            int(ApiKeys.ELECT_LEADERS): self.handle_elect_leaders,
            int(ApiKeys.ALTER_PARTITION_REASSIGNMENTS): self.handle_alter_partition_reassignments,
            int(ApiKeys.LIST_PARTITION_REASSIGNMENTS): self.handle_list_partition_reassignments,
            int(ApiKeys.INCREMENTAL_ALTER_CONFIGS): self.handle_incremental_alter_configs,
            int(ApiKeys.ALTER_CONFIGS): self.handle_legacy_alter_configs,
            int(ApiKeys.DESCRIBE_CONFIGS): self.handle_describe_configs,
        }

    # ------------------------------------------------------------------ plumbing
    def _deadline(self, timeout_ms: int | None) -> int | None:
        if timeout_ms is None or timeout_ms <= 0:
            return None
        return self.clock_ns() + int(timeout_ms) * 1_000_000

    def _answer(self, ctx: RequestContext, future: Any, ok: Callable[[Any], Any],
                failed: Callable[[Errors, str | None], Any]) -> object:
        return answer_when_done(self.node_id, ctx, future, ok, failed)

    # ------------------------------------------------------------------ topics
    def handle_create_topics(self, ctx: RequestContext, request: Any) -> object:
        R = CreateTopicsResponse
        seen: set[str] = set()
        duplicates: set[str] = set()
        for topic in request.topics:
            if topic.name in seen:
                duplicates.add(topic.name)
            seen.add(topic.name)
        names = [name for name in seen if name not in duplicates]  # the request's order is kept below
        extra: list[Any] = [R.CreatableTopicResult(name=n, error_code=int(Errors.INVALID_REQUEST),
                                                   error_message="Duplicate topic name.")
                            for n in sorted(duplicates)]
        if CLUSTER_METADATA_TOPIC in names:
            names.remove(CLUSTER_METADATA_TOPIC)
            extra.append(R.CreatableTopicResult(
                name=CLUSTER_METADATA_TOPIC, error_code=int(Errors.INVALID_REQUEST),
                error_message=f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited."))
        allowed = set(names)
        effective = type(request)(topics=[t for t in request.topics if t.name in allowed],
                                  timeout_ms=request.timeout_ms, validate_only=request.validate_only)

        def ok(response: Any) -> Any:
            response.topics = list(response.topics) + extra
            return response

        def failed(code: Errors, message: str | None) -> Any:
            return R(throttle_time_ms=0, topics=[
                R.CreatableTopicResult(name=t.name, error_code=int(code), error_message=message)
                for t in request.topics])

        future = self.controller.create_topics(effective, allowed, deadline_ns=self._deadline(request.timeout_ms))
        return self._answer(ctx, future, ok, failed)

    def handle_delete_topics(self, ctx: RequestContext, request: Any) -> object:
        R = DeleteTopicsResponse
        deadline = self._deadline(request.timeout_ms)
        results: list[Any] = []

        def respond(name: str | None, topic_id: Uuid, error: ApiError | None) -> None:
            code, message = (Errors.NONE, None) if error is None else (error.error, error.message)
            results.append(R.DeletableTopicResult(name=name, topic_id=topic_id, error_code=int(code),
                                                  error_message=message))

        names: list[str] = []
        dup_names: set[str] = set()
        ids: list[Uuid] = []
        dup_ids: set[Uuid] = set()

        def add_name(name: str) -> None:
            if name in dup_names:
                return
            if name in names:
                names.remove(name)
                dup_names.add(name)
            else:
                names.append(name)

        for name in request.topic_names or ():
            add_name(name)
        for topic in request.topics or ():
            if topic.name is None:
                if topic.topic_id == ZERO_UUID:
                    respond(None, ZERO_UUID, ApiError(Errors.INVALID_REQUEST,
                                                      "Neither topic name nor id were specified."))
                elif topic.topic_id in dup_ids:
                    pass
                elif topic.topic_id in ids:
                    ids.remove(topic.topic_id)
                    dup_ids.add(topic.topic_id)
                else:
                    ids.append(topic.topic_id)
            elif topic.topic_id == ZERO_UUID:
                add_name(topic.name)
            else:
                respond(topic.name, topic.topic_id, ApiError(Errors.INVALID_REQUEST,
                                                             "You may not specify both topic name and topic id."))
        for name in sorted(dup_names):
            respond(name, ZERO_UUID, ApiError(Errors.INVALID_REQUEST, "Duplicate topic name."))
        for topic_id in sorted(dup_ids, key=str):
            respond(None, topic_id, ApiError(Errors.INVALID_REQUEST, "Duplicate topic id."))

        # three steps on the controller: ids -> names, names -> ids, delete; the last answers
        outer: ControllerFuture[None] = ControllerFuture()

        def failed(code: Errors, message: str | None) -> Any:
            every = [R.DeletableTopicResult(name=t, topic_id=ZERO_UUID, error_code=int(code), error_message=message)
                     for t in (request.topic_names or ())]
            every += [R.DeletableTopicResult(name=t.name, topic_id=t.topic_id, error_code=int(code),
                                             error_message=message) for t in (request.topics or ())]
            return R(throttle_time_ms=0, responses=every)

        def ok(_value: Any) -> Any:
            return R(throttle_time_ms=0, responses=results)

        id_to_name: dict[Uuid, str] = {}

        def after_names(f: Any) -> None:
            if f.exception() is not None:
                outer.set_exception(f.exception())
                return
            for topic_id, name_or_error in f.result().items():
                if isinstance(name_or_error, ApiError):
                    respond(None, topic_id, name_or_error)
                else:
                    id_to_name[topic_id] = name_or_error
            self.controller.find_topic_ids(names, deadline_ns=deadline).add_done_callback(after_ids)

        def after_ids(f: Any) -> None:
            if f.exception() is not None:
                outer.set_exception(f.exception())
                return
            for name, id_or_error in f.result().items():
                if isinstance(id_or_error, ApiError):
                    respond(name, ZERO_UUID, id_or_error)
                elif id_or_error in dup_ids or id_or_error in id_to_name:
                    dup_ids.add(id_or_error)
                    id_to_name.pop(id_or_error, None)
                    respond(name, id_or_error, ApiError(
                        Errors.INVALID_REQUEST, "The provided topic name maps to an ID that was already supplied."))
                else:
                    id_to_name[id_or_error] = name
            self.controller.delete_topics(list(id_to_name), deadline_ns=deadline).add_done_callback(after_delete)

        def after_delete(f: Any) -> None:
            if f.exception() is not None:
                outer.set_exception(f.exception())
                return
            for topic_id, error in f.result().items():
                respond(id_to_name.get(topic_id), topic_id, error)
            outer.set_result(None)

        self.controller.find_topic_names(ids, deadline_ns=deadline).add_done_callback(after_names)
        return self._answer(ctx, outer, ok, failed)

    def handle_create_partitions(self, ctx: RequestContext, request: Any) -> object:
        R = CreatePartitionsResponse
        seen: set[str] = set()
        duplicates: set[str] = set()
        for topic in request.topics:
            (duplicates if topic.name in seen else seen).add(topic.name)
        early = [R.CreatePartitionsTopicResult(name=n, error_code=int(Errors.INVALID_REQUEST),
                                               error_message="Duplicate topic name.") for n in sorted(duplicates)]
        topics = [t for t in request.topics if t.name not in duplicates]

        def ok(results: Any) -> Any:
            return R(throttle_time_ms=0, results=early + list(results))

        def failed(code: Errors, message: str | None) -> Any:
            return R(throttle_time_ms=0, results=[
                R.CreatePartitionsTopicResult(name=t.name, error_code=int(code), error_message=message)
                for t in request.topics])

        future = self.controller.create_partitions(topics, bool(request.validate_only),
                                                   deadline_ns=self._deadline(request.timeout_ms))
        return self._answer(ctx, future, ok, failed)

    # ------------------------------------------------------------------ partitions
    def handle_alter_partition(self, ctx: RequestContext, request: Any) -> object:
        def ok(response: Any) -> Any:
            return response

        def failed(code: Errors, _message: str | None) -> Any:
            return AlterPartitionResponse(throttle_time_ms=0, error_code=int(code), topics=[])

        return self._answer(ctx, self.controller.alter_partition(request, ctx.api_version), ok, failed)

    def handle_elect_leaders(self, ctx: RequestContext, request: Any) -> object:
        R = ElectLeadersResponse

        def ok(response: Any) -> Any:
            return response

        def failed(code: Errors, message: str | None) -> Any:
            results = [R.ReplicaElectionResult(topic=t.topic, partition_result=[
                R.PartitionResult(partition_id=p, error_code=int(code), error_message=message) for p in t.partitions])
                for t in (request.topic_partitions or ())]
            return R(throttle_time_ms=0, error_code=int(code), replica_election_results=results)

        future = self.controller.elect_leaders(request, deadline_ns=self._deadline(request.timeout_ms))
        return self._answer(ctx, future, ok, failed)

    def handle_alter_partition_reassignments(self, ctx: RequestContext, request: Any) -> object:
        def ok(response: Any) -> Any:
            return response

        def failed(code: Errors, message: str | None) -> Any:
            return AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=int(code),
                                                       error_message=message, responses=[])

        future = self.controller.alter_partition_reassignments(request, deadline_ns=self._deadline(request.timeout_ms))
        return self._answer(ctx, future, ok, failed)

    def handle_list_partition_reassignments(self, ctx: RequestContext, request: Any) -> object:
        def ok(response: Any) -> Any:
            return response

        def failed(code: Errors, message: str | None) -> Any:
            return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=int(code),
                                                      error_message=message, topics=[])

        future = self.controller.list_partition_reassignments(request.topics,
                                                              deadline_ns=self._deadline(request.timeout_ms))
        return self._answer(ctx, future, ok, failed)

    # ------------------------------------------------------------------ configs
    def _config_resources(self, request: Any, make: Callable[[Any], Any], entry: Callable[..., Any]
                          ) -> tuple[dict[ConfigResource, Any], list[Any]]:
        """Request resources -> {ConfigResource: make(resource)}, with the entries answered
        here (unknown type, duplicates)."""
        changes: dict[ConfigResource, Any] = {}
        duplicates: set[ConfigResource] = set()
        early: list[Any] = []
        for res in request.resources:
            try:
                rtype = ConfigResourceType.for_id(int(res.resource_type))
            except ValueError:
                rtype = None
            if rtype is None or rtype == ConfigResourceType.UNKNOWN:
                early.append(entry(int(Errors.UNSUPPORTED_VERSION), f"Unknown resource type {res.resource_type}.",
                                   res.resource_type, res.resource_name))
                continue
            resource = ConfigResource(rtype, res.resource_name)
            if resource in duplicates:
                continue
            if resource in changes:
                del changes[resource]
                duplicates.add(resource)
                early.append(entry(int(Errors.INVALID_REQUEST), "Duplicate resource.",
                                   res.resource_type, res.resource_name))
                continue
            changes[resource] = make(res)
        return changes, early

    def _alter_configs(self, ctx: RequestContext, request: Any, response_cls: Any, entry_cls: Any,
                       make: Callable[[Any], Any], call: Callable[..., Any]) -> object:
        def entry(code: int, message: str | None, rtype: int, name: str) -> Any:
            return entry_cls(error_code=code, error_message=message, resource_type=rtype, resource_name=name)

        changes, early = self._config_resources(request, make, entry)

        def ok(results: Any) -> Any:
            out = list(early)
            for resource, error in results.items():
                code, message = (0, None) if error is None else (int(error.error), error.message)
                out.append(entry(code, message, int(resource.type), resource.name))
            return response_cls(throttle_time_ms=0, responses=out)

        def failed(code: Errors, message: str | None) -> Any:
            return response_cls(throttle_time_ms=0, responses=[
                entry(int(code), message, r.resource_type, r.resource_name) for r in request.resources])

        return self._answer(ctx, call(changes, bool(request.validate_only)), ok, failed)

    def handle_incremental_alter_configs(self, ctx: RequestContext, request: Any) -> object:
        def make(res: Any) -> dict[str, tuple[Any, str | None]]:
            return {c.name: (AlterConfigOp(int(c.config_operation)), c.value) for c in res.configs}

        R = IncrementalAlterConfigsResponse
        return self._alter_configs(ctx, request, R, R.AlterConfigsResourceResponse, make,
                                   self.controller.incremental_alter_configs)

    def handle_legacy_alter_configs(self, ctx: RequestContext, request: Any) -> object:
        def make(res: Any) -> dict[str, str | None]:
            return {c.name: c.value for c in res.configs}

        R = AlterConfigsResponse
        return self._alter_configs(ctx, request, R, R.AlterConfigsResourceResponse, make,
                                   self.controller.legacy_alter_configs)

    def handle_describe_configs(self, ctx: RequestContext, request: Any) -> object:
        """Every key of each resource with its effective value and source, at the committed
        offset (Kafka's controller answers from its metadata cache the same way): topics and
        brokers from Kafka's config definitions, other types their stored overrides;
        synonyms (v1+) and documentation (v3+) when asked.  Sensitive values are null."""
        R = DescribeConfigsResponse
        resources: dict[ConfigResource, Any] = {}
        early: list[Any] = []
        for res in request.resources:
            try:
                rtype = ConfigResourceType.for_id(int(res.resource_type))
            except ValueError:
                rtype = None
            if rtype is None or rtype == ConfigResourceType.UNKNOWN:
                early.append(R.DescribeConfigsResult(error_code=int(Errors.INVALID_REQUEST),
                                                     error_message=f"Unknown resource type {res.resource_type}.",
                                                     resource_type=res.resource_type,
                                                     resource_name=res.resource_name, configs=[]))
                continue
            resources[ConfigResource(rtype, res.resource_name)] = res.configuration_keys
        synonyms = bool(request.include_synonyms)
        docs = bool(request.include_documentation)

        def entry(e: Any) -> Any:
            return R.DescribeConfigsResourceResult(
                name=e.name, value=e.describe_value, read_only=e.is_read_only, config_source=int(e.source),
                is_sensitive=e.is_sensitive, config_type=e.describe_type_id,
                documentation=e.documentation if docs else None,
                synonyms=[R.DescribeConfigsSynonym(name=s.name, value=s.value, source=int(s.source))
                          for s in e.synonyms] if synonyms else [])

        def ok(results: Any) -> Any:
            out = list(early)
            for resource, (error, entries) in results.items():
                code, message = (0, None) if error is None else (int(error.error), error.message)
                out.append(R.DescribeConfigsResult(
                    error_code=code, error_message=message, resource_type=int(resource.type),
                    resource_name=resource.name, configs=[entry(e) for e in entries]))
            return R(throttle_time_ms=0, results=out)

        def failed(code: Errors, message: str | None) -> Any:
            return R(throttle_time_ms=0, results=[
                R.DescribeConfigsResult(error_code=int(code), error_message=message, resource_type=r.resource_type,
                                        resource_name=r.resource_name, configs=[]) for r in request.resources])

        future = self.controller.describe_configs(resources, include_synonyms=synonyms, include_documentation=docs)
        return self._answer(ctx, future, ok, failed)
