"""Envelope (apiKey 58): a request a broker forwards to the active controller, and its answer.

A broker serves admin writes (CreateTopics, IncrementalAlterConfigs...) by forwarding them,
as Kafka's ``ForwardingManager`` does: the client's request is sent on, unchanged, inside an
EnvelopeRequest with the client's principal and address, so the controller acts for the
client and not for the broker.  This module is both ends' shared part and the controller's
handler:

* :func:`envelope_handler` -- the controller listener's ENVELOPE route (Kafka's
  ``ControllerApis.handleEnvelopeRequest`` + ``EnvelopeUtils``);
* :func:`error_response` -- an API's "error for every item" answer (Kafka's
  ``AbstractRequest.getErrorResponse``), which both ends build when a request cannot be served;
* :func:`serialize_principal` / :func:`parse_principal` -- DefaultPrincipalData with its
  version prefix;
* :func:`response_error_codes` -- every error code in a response (Kafka's ``errorCounts``).

Byte layouts (Kafka's, field by field):

* ``EnvelopeRequest.request_data`` = the inner request's header + body, no size prefix: exactly
  the payload of the frame the client sent (header v1 or v2 as the inner API version says);
* ``EnvelopeRequest.request_principal`` = int16 version (0) + DefaultPrincipalData at that
  version (Kafka's ``MessageUtil.toVersionPrefixedBytes``);
* ``EnvelopeRequest.client_host_address`` = the client's IP address, 4 bytes (IPv4) or 16 (IPv6);
* ``EnvelopeResponse.response_data`` = the inner response's header (the inner request's
  correlation id) + body at the inner version, no size prefix; null when ``error_code`` is set.

Errors, as Kafka's controller answers them:

* the envelope itself is bad -> ``EnvelopeResponse(error_code=X, response_data=None)``:
  principal missing or undecodable PRINCIPAL_DESERIALIZATION_FAILURE; client address not 4 or
  16 bytes INVALID_REQUEST; inner header undecodable or of an api key kraft has no codec for
  UNSUPPORTED_VERSION; an inner API that may not be forwarded (ApiVersions, Envelope itself,
  the Raft RPCs...) INVALID_REQUEST; an inner version kraft does not support or a body that does
  not decode UNSUPPORTED_VERSION (Kafka: "We use UNSUPPORTED_VERSION if the embedded request
  cannot be parsed", which tells the broker to close its client's connection).  Why this
  split: INVALID_REQUEST says the broker built a bad envelope; UNSUPPORTED_VERSION says the
  client and the controller disagree on a version, which only the client can fix;
* the inner API is forwardable but this controller has no route for it -> the inner API's
  error response with UNKNOWN_SERVER_ERROR (Kafka's ``ApiException("Unsupported ApiKey")``);
  a handler that raises -> the same;
* an inner response that carries NOT_CONTROLLER anywhere (NOT_LEADER_OR_FOLLOWER for
  DescribeQuorum) -> the envelope's own NOT_CONTROLLER, no data: that is what tells the
  broker's controller channel to look the active controller up again and retry (Kafka's
  ``RequestChannel.Request.shouldReturnNotController``).

The connection is kept open in every case: an envelope that decodes is always answered.  Bad
envelope framing (an EnvelopeRequest that does not decode) closes it, as every undecodable
request does (:mod:`kraft_node.network.server`).

Decision (authorization): kraft has no authorizer yet, so the principal is only decoded,
validated and logged at DEBUG, and Kafka's CLUSTER_ACTION check of the envelope's sender passes
(Kafka's behaviour with no ``authorizer.class.name``).
"""
from __future__ import annotations

import asyncio
import ipaddress
import logging
import struct
from dataclasses import dataclass, field
from typing import Any, Callable

from kraft_node.network.server import DEFERRED, RequestContext
from kraft_node.protocol.api_keys import API_INFO, ApiKeys, request_header_version
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.framing import UnsupportedApiError, decode_request_header, encode_response
from kraft_node.protocol.generated.default_principal import DefaultPrincipalData
from kraft_node.protocol.generated.envelope import EnvelopeResponse
from kraft_storage.messages.runtime import ZERO_UUID, Message, MessageError, Writer

log = logging.getLogger("kraft.controller.envelope")

__all__ = ["FORWARDABLE_APIS", "EnvelopeError", "ForwardedRequestContext", "envelope_handler", "error_response",
           "parse_client_address", "parse_principal", "request_payload", "response_error_codes",
           "serialize_principal", "wrap_response"]

#: Kafka's ``ApiKeys.forwardable`` flag, for the APIs kraft has codecs for: what a broker may
#: send inside an Envelope.  Anything else inside one is INVALID_REQUEST.
FORWARDABLE_APIS: frozenset[int] = frozenset(int(ApiKeys[name]) for name in (
    "CREATE_TOPICS", "DELETE_TOPICS", "ALTER_CONFIGS", "CREATE_PARTITIONS", "ELECT_LEADERS",
    "INCREMENTAL_ALTER_CONFIGS", "ALTER_PARTITION_REASSIGNMENTS", "LIST_PARTITION_REASSIGNMENTS",
    "DESCRIBE_QUORUM", "UPDATE_FEATURES", "UNREGISTER_BROKER", "ALLOCATE_PRODUCER_IDS",
    "ADD_RAFT_VOTER", "REMOVE_RAFT_VOTER"))

_VERSION_PREFIX = struct.Struct(">h")


class EnvelopeError(Exception):
    """The envelope cannot be served: answered with ``error`` as the EnvelopeResponse's code."""

    def __init__(self, error: Errors, message: str) -> None:
        super().__init__(message)
        self.error = error


# ---------------------------------------------------------------------- principal and address
def serialize_principal(principal_type: str, name: str, token_authenticated: bool = False) -> bytes:
    """int16 version + DefaultPrincipalData (Kafka's ``DefaultKafkaPrincipalBuilder.serialize``)."""
    data = DefaultPrincipalData(type=principal_type, name=name, token_authenticated=token_authenticated)
    version = DefaultPrincipalData.HIGHEST_VERSION
    return _VERSION_PREFIX.pack(version) + data.write(version)


def parse_principal(raw: bytes | None) -> DefaultPrincipalData:
    """The forwarded principal; EnvelopeError PRINCIPAL_DESERIALIZATION_FAILURE if it is missing
    or does not decode.  Bytes after its last field are ignored, as Kafka's reader does."""
    if raw is None:
        raise EnvelopeError(Errors.PRINCIPAL_DESERIALIZATION_FAILURE,
                            "Failed to deserialize client principal from envelope: the principal is null")
    try:
        if len(raw) < 2:
            raise MessageError(f"{len(raw)} bytes, shorter than the int16 version prefix")
        version, = _VERSION_PREFIX.unpack_from(raw, 0)
        if not DefaultPrincipalData.LOWEST_VERSION <= version <= DefaultPrincipalData.HIGHEST_VERSION:
            raise MessageError(f"Invalid principal data version {version}")
        principal, _end = DefaultPrincipalData.read_prefix(raw, 2, version)
    except MessageError as exc:
        raise EnvelopeError(Errors.PRINCIPAL_DESERIALIZATION_FAILURE,
                            f"Failed to deserialize client principal from envelope: {exc}") from None
    return principal


def parse_client_address(raw: bytes) -> str:
    """The client's IP address as text; EnvelopeError INVALID_REQUEST unless 4 or 16 bytes
    (Kafka's ``InetAddress.getByAddress``)."""
    try:
        return str(ipaddress.ip_address(bytes(raw)))
    except ValueError:
        raise EnvelopeError(Errors.INVALID_REQUEST,
                            f"Failed to parse client address from envelope: {len(raw)} bytes "
                            "(an IPv4 address has 4, an IPv6 address 16)") from None


# ---------------------------------------------------------------------- error responses
def _topic_error(request: Any, version: int, code: int, message: str | None) -> Any:
    R = API_INFO[ApiKeys.CREATE_TOPICS].response
    return R(throttle_time_ms=0, topics=[
        R.CreatableTopicResult(name=t.name, error_code=code, error_message=message) for t in request.topics])


def _delete_topics_error(request: Any, version: int, code: int, message: str | None) -> Any:
    # Kafka's DeleteTopicsRequest.getErrorResponse sets no message
    R = API_INFO[ApiKeys.DELETE_TOPICS].response
    if version >= 6:
        entries = [(t.name, t.topic_id) for t in request.topics]
    else:
        entries = [(name, ZERO_UUID) for name in request.topic_names]
    return R(throttle_time_ms=0, responses=[
        R.DeletableTopicResult(name=name, topic_id=topic_id, error_code=code, error_message=None)
        for name, topic_id in entries])


def _create_partitions_error(request: Any, version: int, code: int, message: str | None) -> Any:
    R = API_INFO[ApiKeys.CREATE_PARTITIONS].response
    return R(throttle_time_ms=0, results=[
        R.CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=message) for t in request.topics])


def _alter_configs_error(api: ApiKeys) -> Callable[[Any, int, int, str | None], Any]:
    def build(request: Any, version: int, code: int, message: str | None) -> Any:
        R = API_INFO[api].response
        return R(throttle_time_ms=0, responses=[
            R.AlterConfigsResourceResponse(error_code=code, error_message=message, resource_type=r.resource_type,
                                           resource_name=r.resource_name) for r in request.resources])
    return build


def _elect_leaders_error(request: Any, version: int, code: int, message: str | None) -> Any:
    R = API_INFO[ApiKeys.ELECT_LEADERS].response
    results = [R.ReplicaElectionResult(topic=t.topic, partition_result=[
        R.PartitionResult(partition_id=p, error_code=code, error_message=message) for p in t.partitions])
        for t in (request.topic_partitions or ())]
    # the top-level code exists from v1 on
    return R(throttle_time_ms=0, error_code=code if version >= 1 else 0, replica_election_results=results)


def _alter_reassignments_error(request: Any, version: int, code: int, message: str | None) -> Any:
    R = API_INFO[ApiKeys.ALTER_PARTITION_REASSIGNMENTS].response
    return R(throttle_time_ms=0, error_code=code, error_message=message, responses=[
        R.ReassignableTopicResponse(name=t.name, partitions=[
            R.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=code, error_message=message)
            for p in t.partitions]) for t in request.topics])


def _list_reassignments_error(request: Any, version: int, code: int, message: str | None) -> Any:
    R = API_INFO[ApiKeys.LIST_PARTITION_REASSIGNMENTS].response
    return R(throttle_time_ms=0, error_code=code, error_message=message, topics=[
        R.OngoingTopicReassignment(name=t.name, partitions=[
            R.OngoingPartitionReassignment(partition_index=p) for p in t.partition_indexes])
        for t in (request.topics or ())])


def _update_features_error(request: Any, version: int, code: int, message: str | None) -> Any:
    R = API_INFO[ApiKeys.UPDATE_FEATURES].response
    return R(throttle_time_ms=0, error_code=code, error_message=message, results=[])


_ERROR_RESPONSES: dict[int, Callable[[Any, int, int, str | None], Any]] = {
    int(ApiKeys.CREATE_TOPICS): _topic_error,
    int(ApiKeys.DELETE_TOPICS): _delete_topics_error,
    int(ApiKeys.CREATE_PARTITIONS): _create_partitions_error,
    int(ApiKeys.ALTER_CONFIGS): _alter_configs_error(ApiKeys.ALTER_CONFIGS),
    int(ApiKeys.INCREMENTAL_ALTER_CONFIGS): _alter_configs_error(ApiKeys.INCREMENTAL_ALTER_CONFIGS),
    int(ApiKeys.ELECT_LEADERS): _elect_leaders_error,
    int(ApiKeys.ALTER_PARTITION_REASSIGNMENTS): _alter_reassignments_error,
    int(ApiKeys.LIST_PARTITION_REASSIGNMENTS): _list_reassignments_error,
    int(ApiKeys.UPDATE_FEATURES): _update_features_error,
}


def error_response(api_key: int, request: Any, version: int, error: Errors, message: str | None = None) -> Any:
    """The response of ``api_key`` answering ``request`` (of ``version``) with ``error`` for every
    item, as Kafka's ``getErrorResponse``.  ``message`` follows Kafka's ``ApiError.fromThrowable``:
    None for UNKNOWN_SERVER_ERROR (nothing internal leaks) and for a timeout.  APIs with only a
    top-level code (DescribeQuorum, UnregisterBroker, the voter RPCs...) get that code (and
    message, if the response has the field)."""
    build = _ERROR_RESPONSES.get(int(api_key))
    if error == Errors.UNKNOWN_SERVER_ERROR:
        message = None
    if build is not None:
        return build(request, version, int(error), message)
    response = API_INFO[int(api_key)].response()
    if hasattr(response, "error_code"):
        response.error_code = int(error)
    if hasattr(response, "error_message"):
        response.error_message = message
    return response


def response_error_codes(response: Any) -> set[int]:
    """Every ``error_code`` in ``response``, at any depth (the keys of Kafka's ``errorCounts``)."""
    codes: set[int] = set()
    stack = [response]
    while stack:
        msg = stack.pop()
        for name in type(msg).__slots__:
            value = getattr(msg, name, None)
            if name == "error_code":
                codes.add(int(value))
            elif isinstance(value, (list, tuple)):
                stack.extend(v for v in value if isinstance(v, Message))
            elif isinstance(value, Message):
                stack.append(value)
    return codes


# ---------------------------------------------------------------------- the controller's handler
@dataclass
class ForwardedRequestContext(RequestContext):
    """What the inner request's handler sees: the inner header and version, the forwarded
    client's address (port 0: the envelope does not carry it) and principal, the envelope's
    listener.  ``respond`` wraps the answer into the envelope's answer."""
    principal: DefaultPrincipalData | None = None
    envelope: RequestContext | None = field(default=None, repr=False)

    def respond(self, response: Any) -> None:
        if self._answered:
            return
        self._answered = True
        assert self.envelope is not None
        self.envelope.respond(wrap_response(self, response))


def wrap_response(ctx: RequestContext, response: Any) -> EnvelopeResponse:
    """The EnvelopeResponse carrying ``response`` (the inner request's answer)."""
    key = int(ctx.header.request_api_key)
    codes = response_error_codes(response)
    stale = Errors.NOT_LEADER_OR_FOLLOWER if key == ApiKeys.DESCRIBE_QUORUM else Errors.NOT_CONTROLLER
    if int(stale) in codes:
        return EnvelopeResponse(response_data=None, error_code=int(Errors.NOT_CONTROLLER))
    try:
        framed = encode_response(response, ctx.api_version, ctx.header.correlation_id)
    except Exception:  # noqa: BLE001 - a handler's bad response: still answer
        log.exception("cannot encode the forwarded answer %s v%d", type(response).__name__, ctx.api_version)
        return EnvelopeResponse(response_data=None, error_code=int(Errors.UNKNOWN_SERVER_ERROR))
    return EnvelopeResponse(response_data=bytes(framed[4:]), error_code=0)


def _parse_inner(data: bytes) -> tuple[Any, Any]:
    """``(header, body)`` of the forwarded request, checked in Kafka's order."""
    try:
        header, pos = decode_request_header(data)
    except UnsupportedApiError as exc:
        raise EnvelopeError(Errors.UNSUPPORTED_VERSION, f"Unknown API key in envelope: {exc}") from None
    except MessageError as exc:
        raise EnvelopeError(Errors.UNSUPPORTED_VERSION, f"Failed to parse request header from envelope: {exc}") \
            from None
    key, version = int(header.request_api_key), int(header.request_api_version)
    info = API_INFO[key]
    if key not in FORWARDABLE_APIS:
        raise EnvelopeError(Errors.INVALID_REQUEST,
                            f"API {info.key.name} is not enabled or is not eligible for forwarding")
    if not info.supports(version):
        raise EnvelopeError(Errors.UNSUPPORTED_VERSION,
                            f"Failed to parse forwarded request with header {header}: unsupported {info.name} "
                            f"version {version} (supported {info.lowest}-{info.highest})")
    try:
        body, _end = info.request.read_prefix(data, pos, version)  # trailing bytes ignored, as Kafka does
    except MessageError as exc:
        raise EnvelopeError(Errors.UNSUPPORTED_VERSION,
                            f"Failed to parse forwarded request with header {header}: {exc}") from None
    return header, body


def envelope_handler(routes: dict[int, Callable[[RequestContext, Any], Any]]) -> Callable[[RequestContext, Any], Any]:
    """The ENVELOPE handler for the controller listener: unwraps, runs the inner API's route
    from ``routes`` (read at each request, so routes registered later are seen), wraps the answer.

    The inner handler may return its response, a coroutine (then this handler returns one the
    server runs as its task, cancelled if the envelope's connection closes), or DEFERRED and call
    ``ctx.respond`` later (then so does this one)."""
    def handle(ctx: RequestContext, envelope: Any) -> Any:
        peer = f"{ctx.peer[0]}:{ctx.peer[1]}"
        try:
            principal = parse_principal(envelope.request_principal)
            client = parse_client_address(envelope.client_host_address)
            header, body = _parse_inner(envelope.request_data)
        except EnvelopeError as exc:
            log.info("envelope from %s answered %s: %s", peer, exc.error.name, exc)
            return EnvelopeResponse(response_data=None, error_code=int(exc.error))
        key, version = int(header.request_api_key), int(header.request_api_version)
        log.debug("envelope from %s: %s v%d (correlation id %d) for client %s, principal %s:%s", peer,
                  API_INFO[key].name, version, header.correlation_id, client, principal.type, principal.name)
        inner = ForwardedRequestContext(header, version, (client, 0), ctx.listener, principal=principal,
                                        envelope=ctx)
        handler = routes.get(key)
        if handler is None:
            log.info("envelope from %s: no route for forwarded %s on listener %s", peer, API_INFO[key].name,
                     ctx.listener)
            return _answer_error(inner, body, Errors.UNKNOWN_SERVER_ERROR)
        try:
            result = handler(inner, body)
        except Exception:  # noqa: BLE001 - a handler bug: answer the client, keep the server
            log.exception("error serving forwarded %s from %s", API_INFO[key].name, peer)
            return _answer_error(inner, body, Errors.UNKNOWN_SERVER_ERROR)
        if result is DEFERRED:
            return DEFERRED
        if asyncio.iscoroutine(result):
            return _await_inner(inner, body, result)
        inner._answered = True
        return wrap_response(inner, result)

    return handle


def _answer_error(inner: ForwardedRequestContext, body: Any, error: Errors) -> EnvelopeResponse:
    inner._answered = True
    key = int(inner.header.request_api_key)
    return wrap_response(inner, error_response(key, body, inner.api_version, error))


async def _await_inner(inner: ForwardedRequestContext, body: Any, coro: Any) -> EnvelopeResponse:
    try:
        result = await coro
    except Exception:  # noqa: BLE001 - as a synchronous handler's failure
        log.exception("error serving forwarded %s", API_INFO[int(inner.header.request_api_key)].name)
        return _answer_error(inner, body, Errors.UNKNOWN_SERVER_ERROR)
    inner._answered = True
    return wrap_response(inner, result)


def request_payload(header: Any, body: Any, version: int) -> bytes:
    """A request's header + body without the size prefix (what ``request_data`` holds), at
    ``version`` with the header version it implies."""
    body._check_version(version)
    w = Writer()
    header._write(w, request_header_version(int(header.request_api_key), version))
    body._write(w, version)
    return bytes(w.out)
