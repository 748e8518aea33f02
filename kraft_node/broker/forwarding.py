"""The broker forwards admin writes to the active controller (Kafka's ``ForwardingManager``).

A KRaft broker owns no metadata: CreateTopics, DeleteTopics, CreatePartitions, the config
writes, ElectLeaders, the reassignment RPCs and UpdateFeatures are decided by the active
controller.  The broker wraps the client's request -- its own header (api version, correlation
id, client id) and body, encoded at the client's version -- in an EnvelopeRequest with the
client's principal and IP address, sends it over the controller channel, and hands the
controller's answer back to the client.  The controller answers a write only once its records
are committed (:mod:`kraft_node.server.topic_apis`), so a success the client sees is durable.
Byte layouts of the envelope: :mod:`kraft_node.network.envelope`.

The channel (``kraft_node.broker.controller_channel.ControllerChannel``) finds the active
controller, retries on NOT_CONTROLLER (the envelope's own code, which the controller sets
whenever the inner answer carries it) and on lost connections, and gives up at its timeout.
What the client gets when forwarding fails, as Kafka's ``ForwardingManagerImpl``:

* the channel gave up (no controller answered before the timeout: ControllerUnavailableError, a
  TimeoutError or OSError) -> the API's error response with REQUEST_TIMED_OUT for every item
  (Kafka's ``onTimeout``); the controller shares no version of Envelope with kraft
  (UnsupportedControllerVersionError, Kafka's ``versionMismatch``) or any other failure ->
  UNKNOWN_SERVER_ERROR;
* envelope error UNSUPPORTED_VERSION (the controller cannot parse the client's version) -> the
  client's connection is closed, so that it reconnects and asks ApiVersions again;
* envelope error NOT_CONTROLLER (the channel gave up retrying) -> NOT_CONTROLLER for every item.
  Decision: Kafka's channel never surfaces it (it retries until the timeout and then says
  REQUEST_TIMED_OUT); if kraft's does, NOT_CONTROLLER is what Kafka's clients retry on after
  refreshing their metadata, which is the right outcome;
* any other envelope error, an answer that does not decode or whose correlation id is not the
  client's -> UNKNOWN_SERVER_ERROR for every item (Kafka hides broker misconfiguration from
  clients this way; the detail is logged here).

Before forwarding, the broker does what Kafka's broker does itself (``ConfigAdminManager.preprocess``)
for AlterConfigs and IncrementalAlterConfigs: a resource named twice, a config key named twice
in a resource, a null value (except an incremental DELETE), an unknown resource type, and a
BROKER resource naming another broker are answered here; the rest is forwarded and the answers
are put back in the request's order.  Everything else Kafka validates on the controller
(duplicate topics, ``__cluster_metadata``...) is left to the controller: kraft's does it.
Not done (refused by name): BROKER_LOGGER changes (Kafka applies them on the broker itself);
the dynamic broker config validation Kafka runs on the broker before forwarding.

The client's deadline.  The APIs with a ``timeout_ms`` field (CreateTopics, DeleteTopics,
CreatePartitions, ElectLeaders, the reassignment RPCs, UpdateFeatures) tell how long the client
waits; the controller starts no write for a request whose ``timeout_ms`` has passed since it got it
(Kafka's ``requestTimeoutMsToDeadlineNs``).  The channel resends after a lost connection or
NOT_CONTROLLER, so a resend sent late would start the write late: a client that gave up, asked
again through another broker, was answered, and then deleted the topic could see its creation
come back from the first broker's resend.  Decision (kraft's, Kafka does not do this): the
first attempt is the client's request byte for byte, each resend carries the time left of the
client's ``timeout_ms`` counted from the broker's receipt, no attempt is sent once it is spent,
and the broker waits for an answer at most :data:`COMMIT_GRACE_S` longer.  Once the client's
timeout has passed (give or take the time an attempt spends on the wire), nothing it asked for
can still start.  The config writes have no
``timeout_ms``: they keep the channel's deadline.

Auto-creation (:meth:`ForwardingManager.auto_create_topics`, for Metadata with
``auto.create.topics.enable``): a CreateTopics in an envelope, fire and forget; topics already
being created are not asked for again (Kafka's ``inflightTopics``).
"""
from __future__ import annotations

import asyncio
import copy
import ipaddress
import logging
import math
from typing import Any, Awaitable, Callable, Iterable, Protocol

from kraft_node.broker.controller_channel import ControllerChannelError, UnsupportedControllerVersionError
from kraft_node.network.envelope import error_response, request_payload, serialize_principal
from kraft_node.network.server import RequestContext
from kraft_node.protocol.api_keys import API_INFO, ApiKeys
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.framing import decode_response
from kraft_node.protocol.generated.create_topics import CreateTopicsRequest
from kraft_node.protocol.generated.envelope import EnvelopeRequest
from kraft_node.protocol.headers import RequestHeader
from kraft_storage.messages.runtime import MessageError

log = logging.getLogger("kraft.broker.forwarding")

__all__ = ["ControllerSender", "ForwardingManager", "ForwardedVersionMismatch", "FORWARDED_APIS"]

#: The APIs a broker forwards (issue 24 item 6), each at every version kraft has a codec for
#: (CreateTopics 2-7, DeleteTopics 1-6, ...).
FORWARDED_APIS: tuple[int, ...] = tuple(int(ApiKeys[name]) for name in (
    "CREATE_TOPICS", "DELETE_TOPICS", "CREATE_PARTITIONS", "INCREMENTAL_ALTER_CONFIGS", "ALTER_CONFIGS",
    "ELECT_LEADERS", "ALTER_PARTITION_REASSIGNMENTS", "LIST_PARTITION_REASSIGNMENTS", "UPDATE_FEATURES"))

Handler = Callable[[RequestContext, Any], Awaitable[Any]]

#: How long past the client's ``timeout_ms`` the broker still waits for the controller's answer
#: to an attempt sent in time: the controller answers a write once it is committed, which may be
#: after the deadline that bounded its start.
COMMIT_GRACE_S = 5.0

_CREATE_TOPICS = int(ApiKeys["CREATE_TOPICS"])
_ALTER_CONFIGS = int(ApiKeys["ALTER_CONFIGS"])
_INCREMENTAL_ALTER_CONFIGS = int(ApiKeys["INCREMENTAL_ALTER_CONFIGS"])

# ConfigResource type ids (Kafka's ConfigResource.Type)
_TOPIC, _BROKER, _BROKER_LOGGER, _CLIENT_METRICS, _GROUP = 2, 4, 8, 16, 32
_DELETE_OP = 1  # AlterConfigOp.OpType.DELETE


class ControllerSender(Protocol):
    """What forwarding needs of the controller channel: send one request to the active controller
    and return its response body, or raise when none answered in time."""

    #: the deadline of a send that gives no ``timeout_s``
    request_timeout_s: float

    async def send(self, body: Any, version: int | None = None, *, timeout_s: float | None = None,
                   restamp: Callable[[], Any] | None = None) -> Any: ...


class ForwardedVersionMismatch(Exception):
    """The controller cannot parse the client's request version: the server closes the
    client's connection (raised from the handler), as Kafka's broker does."""


class ForwardingManager:
    """Forwards the broker listener's admin writes to the active controller.

    ``channel``: the controller channel.  ``node_id``: this broker's id (a BROKER config
    resource must name it; None skips that check).  ``principal``: (type, name) sent as the
    client's principal -- ``User:ANONYMOUS`` while kraft has no authentication.
    ``client_host``: the address sent when the client's is unknown (and for auto-creation).
    ``timeout_s``: how long a forwarded request may take (None: the channel's own timeout).
    """

    def __init__(self, channel: ControllerSender, *, node_id: int | None = None,
                 principal: tuple[str, str] = ("User", "ANONYMOUS"), client_host: str = "127.0.0.1",
                 timeout_s: float | None = None, client_id: str = "kraft-broker") -> None:
        self.channel = channel
        self.node_id = node_id
        self.principal = principal
        self.timeout_s = timeout_s
        self.client_id = client_id
        self._principal_bytes = serialize_principal(*principal)
        self._fallback_address = _address_bytes(client_host)
        if self._fallback_address is None:
            raise ValueError(f"client_host {client_host!r} is not an IP address")
        self._inflight_topics: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._correlation = 0
        #: requests sent to the controller and not answered yet (Kafka's ForwardingQueueSize)
        self.in_flight = 0

    # ------------------------------------------------------------------ handlers
    def forwarding_handlers(self) -> dict[int, Handler]:
        """``api key -> handler`` for the broker listener's routing table."""
        handlers: dict[int, Handler] = {key: self.forward for key in FORWARDED_APIS}
        handlers[_INCREMENTAL_ALTER_CONFIGS] = self._incremental_alter_configs
        handlers[_ALTER_CONFIGS] = self._alter_configs
        return handlers

    async def forward(self, ctx: RequestContext, request: Any) -> Any:
        """Forward ``request`` as the client sent it; the response for the client."""
        header: Any = ctx.header
        return await self._forward(header, request, ctx.api_version, _address_bytes(str(ctx.peer[0])))

    async def _forward(self, header: Any, request: Any, version: int, address: bytes | None) -> Any:
        key = int(header.request_api_key)
        name = API_INFO[key].name
        host = address or self._fallback_address

        def envelope_of(body: Any) -> EnvelopeRequest:
            return EnvelopeRequest(request_data=request_payload(header, body, version),
                                   request_principal=self._principal_bytes, client_host_address=host)
        envelope = envelope_of(request)
        timeout_s = self.timeout_s
        restamp: Callable[[], EnvelopeRequest | None] | None = None
        client_timeout_ms = getattr(request, "timeout_ms", None)
        if type(client_timeout_ms) is int and client_timeout_ms > 0:
            # The client's own deadline bounds every attempt (see "The client's deadline" above).
            loop = asyncio.get_running_loop()
            start_deadline = loop.time() + client_timeout_ms / 1000
            attempts = 0

            def stamp_left() -> EnvelopeRequest | None:
                nonlocal attempts
                attempts += 1
                left_ms = math.ceil((start_deadline - loop.time()) * 1000)
                if left_ms <= 0:
                    return None
                if attempts == 1:
                    return envelope  # the first attempt: the client's request byte for byte
                stamped = copy.copy(request)
                stamped.timeout_ms = left_ms
                return envelope_of(stamped)
            restamp = stamp_left
            bound = client_timeout_ms / 1000 + COMMIT_GRACE_S
            timeout_s = min(self.channel.request_timeout_s if timeout_s is None else timeout_s, bound)
        self.in_flight += 1
        try:
            answer = await self.channel.send(envelope, 0, timeout_s=timeout_s, restamp=restamp)
        except UnsupportedControllerVersionError as exc:  # Kafka's versionMismatch
            log.warning("forwarding %s v%d: %s", name, version, exc)
            return error_response(key, request, version, Errors.UNKNOWN_SERVER_ERROR)
        except (ControllerChannelError, TimeoutError, OSError) as exc:  # no controller answered in time
            log.warning("forwarding %s v%d (correlation id %d) failed: %s", name, version, header.correlation_id,
                        exc or type(exc).__name__)
            return error_response(key, request, version, Errors.REQUEST_TIMED_OUT)
        except Exception:  # noqa: BLE001 - a bug below: the client still gets an answer
            log.exception("forwarding %s v%d failed", name, version)
            return error_response(key, request, version, Errors.UNKNOWN_SERVER_ERROR)
        finally:
            self.in_flight -= 1
        code = int(answer.error_code)
        if code == Errors.UNSUPPORTED_VERSION:
            raise ForwardedVersionMismatch(
                f"the active controller cannot parse {name} v{version}; closing the client's connection "
                "so that it asks ApiVersions again")
        if code == Errors.NOT_CONTROLLER:
            log.info("forwarding %s v%d: the controller channel gave up on NOT_CONTROLLER", name, version)
            return error_response(key, request, version, Errors.NOT_CONTROLLER)
        if code != Errors.NONE or answer.response_data is None:
            log.warning("forwarded %s v%d failed with an error in the envelope response: %s", name, version,
                        _error_name(code) if code else "no response data")
            return error_response(key, request, version, Errors.UNKNOWN_SERVER_ERROR)
        try:
            response_header, response = decode_response(answer.response_data, key, version)
        except (MessageError, KeyError) as exc:
            log.error("cannot decode the forwarded answer to %s v%d: %s", name, version, exc)
            return error_response(key, request, version, Errors.UNKNOWN_SERVER_ERROR)
        if response_header.correlation_id != header.correlation_id:
            log.error("the forwarded answer to %s v%d has correlation id %d, the request %d", name, version,
                      response_header.correlation_id, header.correlation_id)
            return error_response(key, request, version, Errors.UNKNOWN_SERVER_ERROR)
        return response

    # ------------------------------------------------------------------ config writes
    async def _incremental_alter_configs(self, ctx: RequestContext, request: Any) -> Any:
        return await self._alter_configs_common(ctx, request, incremental=True)

    async def _alter_configs(self, ctx: RequestContext, request: Any) -> Any:
        return await self._alter_configs_common(ctx, request, incremental=False)

    async def _alter_configs_common(self, ctx: RequestContext, request: Any, *, incremental: bool) -> Any:
        """Kafka's ConfigAdminManager.preprocess, then the rest forwarded, then reassembled."""
        early = self._preprocess_configs(request.resources, incremental)
        remaining = [r for i, r in enumerate(request.resources) if i not in early]
        key = _INCREMENTAL_ALTER_CONFIGS if incremental else _ALTER_CONFIGS
        R: Any = API_INFO[key].response
        answered: dict[tuple[int, str], tuple[int, str | None]] = {}
        if remaining:
            forwarded = type(request)(resources=remaining, validate_only=request.validate_only)
            header: Any = ctx.header
            response = await self._forward(header, forwarded, ctx.api_version, _address_bytes(str(ctx.peer[0])))
            answered = {(int(r.resource_type), r.resource_name): (int(r.error_code), r.error_message)
                        for r in response.responses}
        out = []
        for i, res in enumerate(request.resources):
            result = early.get(i)
            if result is None:
                result = answered.get((int(res.resource_type), res.resource_name))
                if result is None:
                    log.error("the controller returned fewer results than expected: none for resource type %d "
                              "name %r", res.resource_type, res.resource_name)
                    result = (int(Errors.UNKNOWN_SERVER_ERROR), None)
            out.append(R.AlterConfigsResourceResponse(error_code=result[0], error_message=result[1],
                                                      resource_type=res.resource_type,
                                                      resource_name=res.resource_name))
        return R(throttle_time_ms=0, responses=out)

    def _preprocess_configs(self, resources: list[Any], incremental: bool) -> dict[int, tuple[int, str | None]]:
        """Position in the request -> (code, message) for the resources answered on the broker."""
        invalid = int(Errors.INVALID_REQUEST)
        results: dict[int, tuple[int, str | None]] = {}
        first: dict[tuple[int, str], int] = {}
        for i, res in enumerate(resources):
            ident = (int(res.resource_type), res.resource_name)
            if ident in first:
                for j in (first[ident], i):
                    results[j] = (invalid, "Each resource must appear at most once.")
            else:
                first[ident] = i
        for i, res in enumerate(resources):
            if i in results:
                continue
            names = [c.name for c in res.configs]
            if len(set(names)) != len(names):
                results[i] = (invalid, "Error due to duplicate config keys")
                continue
            nulls = [c.name for c in res.configs
                     if c.value is None and not (incremental and int(c.config_operation) == _DELETE_OP)]
            if nulls:
                results[i] = (invalid, "Null value not supported for : " + ", ".join(nulls))
                continue
            rtype = int(res.resource_type)
            if rtype == _BROKER and res.resource_name:
                error = self._check_broker_name(res.resource_name)
                if error is not None:
                    results[i] = (invalid, error)
            elif rtype == _BROKER_LOGGER and incremental:
                results[i] = (invalid, "BROKER_LOGGER configs are not supported by kraft yet "
                                       "(Kafka changes the broker's log levels)")
            elif rtype not in (_TOPIC, _BROKER, _CLIENT_METRICS, _GROUP):
                results[i] = (invalid, f"Unknown resource type {rtype}")
        for i, (code, message) in results.items():
            log.info("answering %s for config resource type %d name %r on the broker: %s",
                     _error_name(code), resources[i].resource_type, resources[i].resource_name, message)
        return results

    def _check_broker_name(self, name: str) -> str | None:
        if self.node_id is None:
            return None
        try:
            node = int(name)
        except ValueError:
            return f"Node id must be an integer, but it is: {name}"
        if node != self.node_id:
            return f"Unexpected broker id, expected {self.node_id}, but received {name}"
        return None

    # ------------------------------------------------------------------ auto-creation
    def auto_create_topics(self, names: Iterable[str], num_partitions: int = 1, replication_factor: int = 1) -> None:
        """Ask the controller to create ``names`` (Metadata's auto-creation); returns at once.
        Topics already being created by an earlier call are skipped.  The outcome is logged
        (DEBUG when created or already there, INFO otherwise).  Call from the event loop."""
        fresh = sorted({n for n in names if n not in self._inflight_topics})
        if not fresh:
            return
        self._inflight_topics.update(fresh)
        CT: Any = CreateTopicsRequest
        version = API_INFO[_CREATE_TOPICS].highest
        timeout_ms = int((self.timeout_s if self.timeout_s is not None else 30.0) * 1000)
        request = CT(topics=[CT.CreatableTopic(name=n, num_partitions=num_partitions,
                                               replication_factor=replication_factor, assignments=[], configs=[])
                             for n in fresh], timeout_ms=timeout_ms, validate_only=False)
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        header = _new_header(request_api_key=_CREATE_TOPICS, request_api_version=version,
                             correlation_id=self._correlation, client_id=self.client_id)
        task = asyncio.get_running_loop().create_task(self._auto_create(header, request, version, fresh))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _auto_create(self, header: Any, request: Any, version: int, names: list[str]) -> None:
        try:
            response = await self._forward(header, request, version, None)
            for t in response.topics:
                if t.error_code in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS):
                    log.debug("auto-creation of topic %s: %s", t.name, _error_name(int(t.error_code)))
                else:
                    log.info("auto-creation of topic %s failed: %s %s", t.name, _error_name(int(t.error_code)),
                             t.error_message or "")
        except Exception:  # noqa: BLE001 - fire and forget: the client's next Metadata will say
            log.exception("auto-creation of topics %s failed", names)
        finally:
            self._inflight_topics.difference_update(names)

    @property
    def auto_creating(self) -> frozenset[str]:
        """The topics whose auto-creation has been asked and not answered yet."""
        return frozenset(self._inflight_topics)

    async def close(self) -> None:
        """Cancel auto-creations still waiting for the controller."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


#: the generated header class (untyped)
_new_header: Any = RequestHeader


def _address_bytes(host: str) -> bytes | None:
    """The packed IP address (4 or 16 bytes) of ``host``, None if it is not an IP address."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).packed
    except ValueError:
        return None


def _error_name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return f"error code {code}"
