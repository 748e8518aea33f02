"""The controller's RPCs (Kafka's ``ControllerApis``): request -> controller call -> response.

Each handler decodes nothing itself (the listener hands it the generated request object),
calls one public method of the
:class:`~kraft_node.metadata.controller.quorum_controller.QuorumController`, and returns
:data:`~kraft_node.network.server.DEFERRED`; the answer is sent from the controller future's
done callback, on the loop's thread, once the controller has answered -- for a write, once its
records are committed.  No task or asyncio future per request.

What each answer carries (Kafka's, field by field):

* success: the reply's fields, ``throttle_time_ms`` 0 (kraft has no quotas);
* failure: the :class:`~kraft_node.metadata.controller.errors.ApiError`'s code, and its
  message where Kafka sends one (ControllerRegistration, UpdateFeatures; UnregisterBroker has
  the field but Kafka leaves it null).  Decision: for ControllerRegistration Kafka sends the
  code's generic text (``Errors.message()``); kraft sends the controller's own message, which
  says more (e.g. which node is active).  Any other exception is UNKNOWN_SERVER_ERROR (Kafka's
  ``Errors.forException``).  A standby answers NOT_CONTROLLER: the controller fails the
  event with "The active controller appears to be node N." -- the code is what brokers act
  on (they look the active controller up and retry).

BrokerHeartbeat first records the broker's contact time in the heartbeat tracker, in the
handler, before the heartbeat event is queued (KAFKA-15019): a controller whose queue is
backed up must not fence a broker that is heartbeating.  Its event has a deadline of half
the heartbeat interval, as in Kafka: a heartbeat answered later than that is useless to the
broker, which will have sent the next one.

BrokerHeartbeat is the controller's most frequent request (5k/s for 10k brokers at Kafka's
2 s interval), so it takes a leaner path than the others, with the same semantics: the
controller's callback form (``answer_broker_heartbeat``: one event object, no future or
done-callback closures), answers framed from a small table of pre-encoded bodies
(:class:`~kraft_node.protocol.framing.ResponseFrames`, the correlation id patched in), and a
connection's read-ahead heartbeats dispatched at once (``pipelined``: their events run and
complete in order, so their answers still go out in request order, several in one write).
Measured (``controller_tcp_bench.py rpc-local`` and ``heartbeats``, session 16): about a
third less CPU per heartbeat on the active controller.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from kraft_node.metadata.controller.errors import ApiError
from kraft_node.metadata.controller.features import UpgradeType
from kraft_node.network.server import DEFERRED, RequestContext, pipelined
from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.framing import ResponseFrames
from kraft_node.protocol.generated.allocate_producer_ids import AllocateProducerIdsResponse
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatResponse
from kraft_node.protocol.generated.broker_registration import BrokerRegistrationResponse
from kraft_node.protocol.generated.controller_registration import ControllerRegistrationResponse
from kraft_node.protocol.generated.unregister_broker import UnregisterBrokerResponse
from kraft_node.protocol.generated.update_features import UpdateFeaturesResponse

log = logging.getLogger("kraft.controller.apis")

__all__ = ["ControllerApis", "answer_when_done", "error_of"]

#: Kafka's ``broker.heartbeat.interval.ms`` default, when no settings are given.
_DEFAULT_HEARTBEAT_INTERVAL_MS = 2000


def error_of(exc: BaseException) -> tuple[Errors, str | None]:
    """The code and message a response carries for ``exc`` (Kafka's ``ApiError.fromThrowable``):
    an ApiError's own, anything else UNKNOWN_SERVER_ERROR with its text."""
    if isinstance(exc, ApiError):
        return exc.error, exc.message
    return Errors.UNKNOWN_SERVER_ERROR, str(exc) or type(exc).__name__


def answer_when_done(node_id: int, ctx: RequestContext, future: Any, ok: Callable[[Any], Any],
                     failed: Callable[[Errors, str | None], Any]) -> object:
    """Answer ``ctx`` when ``future`` (a ControllerFuture) completes: ``ok(result)`` or
    ``failed(code, message)`` builds the response (a bug building it still answers, with the
    failure's code).  Returns DEFERRED for the handler to return."""
    def done(f: Any) -> None:
        try:
            exc = f.exception()
            response = ok(f.result()) if exc is None else failed(*error_of(exc))
        except Exception as exc:  # noqa: BLE001 - a bug building the answer: still answer
            log.exception("node %d: cannot build the answer to %s", node_id,
                          ApiKeys(int(ctx.header.request_api_key)).name)
            response = failed(*error_of(exc))
        ctx.respond(response)

    future.add_done_callback(done)
    return DEFERRED


class ControllerApis:
    """The handlers of the controller RPCs for the node's routing table (:meth:`handlers`).

    ``controller``: the node's QuorumController.  ``settings``: the node's
    ControllerSettings (the heartbeat interval sets the heartbeat deadline).
    ``clock_ns``: the controller queue's clock (deadlines are in it)."""

    def __init__(self, controller: Any, *, node_id: int, settings: Any = None,
                 clock_ns: Callable[[], int]) -> None:
        self.controller = controller
        self.node_id = node_id
        self.clock_ns = clock_ns
        interval_ms = getattr(settings, "broker_heartbeat_interval_ms", _DEFAULT_HEARTBEAT_INTERVAL_MS)
        #: how long a heartbeat may wait in the queue (Kafka: brokerHeartbeatIntervalMs / 2)
        self.heartbeat_timeout_ns = interval_ms * 1_000_000 // 2
        #: the few distinct BrokerHeartbeat answers, framed once (see ResponseFrames)
        self._heartbeat_frames = ResponseFrames()

    def handlers(self) -> dict[int, Callable[[RequestContext, Any], Any]]:
        return {
            int(ApiKeys.BROKER_REGISTRATION): self.handle_broker_registration,
            int(ApiKeys.BROKER_HEARTBEAT): self.handle_broker_heartbeat,
            int(ApiKeys.CONTROLLER_REGISTRATION): self.handle_controller_registration,
            int(ApiKeys.UNREGISTER_BROKER): self.handle_unregister_broker,
            int(ApiKeys.ALLOCATE_PRODUCER_IDS): self.handle_allocate_producer_ids,
            int(ApiKeys.UPDATE_FEATURES): self.handle_update_features,
        }

    # ------------------------------------------------------------------ plumbing
    def _answer(self, ctx: RequestContext, future: Any, ok: Callable[[Any], Any],
                failed: Callable[[Errors, str | None], Any]) -> object:
        return answer_when_done(self.node_id, ctx, future, ok, failed)

    # ------------------------------------------------------------------ handlers
    def handle_broker_registration(self, ctx: RequestContext, request: Any) -> object:
        def ok(reply: Any) -> BrokerRegistrationResponse:
            return BrokerRegistrationResponse(throttle_time_ms=0, error_code=0, broker_epoch=reply.epoch)

        def failed(code: Errors, _message: str | None) -> BrokerRegistrationResponse:
            return BrokerRegistrationResponse(throttle_time_ms=0, error_code=int(code), broker_epoch=-1)

        return self._answer(ctx, self.controller.register_broker(request), ok, failed)

    @pipelined  # answered in call order: one FIFO queue, one FIFO purgatory (see network.server.pipelined)
    def handle_broker_heartbeat(self, ctx: RequestContext, request: Any) -> object:
        controller = self.controller
        # KAFKA-15019: the contact time first, then the event (which may wait in the queue)
        controller.track_broker_heartbeat(request.broker_id, request.broker_epoch)
        controller.answer_broker_heartbeat(request, self._answer_heartbeat,
                                           deadline_ns=self.clock_ns() + self.heartbeat_timeout_ns, context=ctx)
        return DEFERRED

    def _answer_heartbeat(self, ctx: RequestContext, reply: Any, exc: BaseException | None) -> None:
        """The answer: the reply's three flags (throttle 0), or the error's code alone, as a
        cached frame with this request's correlation id (the body is one of a few)."""
        try:
            version = ctx.api_version
            correlation_id = ctx.header.correlation_id  # type: ignore[attr-defined]
            frames = self._heartbeat_frames
            if exc is None:
                key: tuple[Any, ...] = (version, reply.is_caught_up, reply.is_fenced, reply.should_shut_down)
                frame = frames.get(key, correlation_id)  # the steady state: built before
                if frame is None:
                    caught_up, fenced, shut_down = bool(reply.is_caught_up), bool(reply.is_fenced), \
                        bool(reply.should_shut_down)
                    frame = frames.frame(
                        key, version, correlation_id,
                        lambda: BrokerHeartbeatResponse(throttle_time_ms=0, error_code=0, is_caught_up=caught_up,
                                                        is_fenced=fenced, should_shut_down=shut_down))
            else:
                code = int(error_of(exc)[0])  # the other fields keep the schema's defaults
                frame = frames.frame(
                    (version, code), version, correlation_id,
                    lambda: BrokerHeartbeatResponse(throttle_time_ms=0, error_code=code))
        except Exception as bug:  # noqa: BLE001 - a bug building the answer: still answer
            log.exception("node %d: cannot build the answer to BROKER_HEARTBEAT", self.node_id)
            ctx.respond(BrokerHeartbeatResponse(throttle_time_ms=0, error_code=int(error_of(bug)[0])))
            return
        ctx.respond_frame(frame)

    def handle_controller_registration(self, ctx: RequestContext, request: Any) -> object:
        def ok(_reply: Any) -> ControllerRegistrationResponse:
            return ControllerRegistrationResponse(throttle_time_ms=0, error_code=0, error_message=None)

        def failed(code: Errors, message: str | None) -> ControllerRegistrationResponse:
            return ControllerRegistrationResponse(throttle_time_ms=0, error_code=int(code), error_message=message)

        return self._answer(ctx, self.controller.register_controller(request), ok, failed)

    def handle_unregister_broker(self, ctx: RequestContext, request: Any) -> object:
        """An operator removes a broker's registration (kafka-cluster unregister).  Kafka
        answers the code only (its error_message field stays null)."""
        def ok(_reply: Any) -> UnregisterBrokerResponse:
            return UnregisterBrokerResponse(throttle_time_ms=0, error_code=0, error_message=None)

        def failed(code: Errors, _message: str | None) -> UnregisterBrokerResponse:
            return UnregisterBrokerResponse(throttle_time_ms=0, error_code=int(code), error_message=None)

        return self._answer(ctx, self.controller.unregister_broker(request.broker_id), ok, failed)

    def handle_allocate_producer_ids(self, ctx: RequestContext, request: Any) -> object:
        def ok(block: Any) -> AllocateProducerIdsResponse:
            return AllocateProducerIdsResponse(throttle_time_ms=0, error_code=0,
                                               producer_id_start=block.first_producer_id,
                                               producer_id_len=block.size)

        def failed(code: Errors, _message: str | None) -> AllocateProducerIdsResponse:
            return AllocateProducerIdsResponse(throttle_time_ms=0, error_code=int(code))

        return self._answer(ctx, self.controller.allocate_producer_ids(request.broker_id, request.broker_epoch),
                            ok, failed)

    def handle_update_features(self, ctx: RequestContext, request: Any) -> object:
        """Kafka 4.x's answer: one error for the whole request ("The update failed for all
        features since the following feature had an error: ..."); on success no top-level
        message and, up to v1 only, a result per feature (code NONE, message "NONE", as
        Kafka's ``Errors.NONE.message()``)."""
        version = ctx.api_version
        updates: dict[str, int] = {}
        upgrade_types: dict[str, UpgradeType] = {}
        for u in request.feature_updates:
            updates[u.feature] = int(u.max_version_level)
            upgrade_types[u.feature] = UpgradeType.of_request(int(u.upgrade_type), bool(u.allow_downgrade), version)

        def ok(results: dict[str, ApiError | None]) -> UpdateFeaturesResponse:
            R = UpdateFeaturesResponse
            error = next((e for e in results.values() if e is not None), None)
            if error is not None:
                return R(throttle_time_ms=0, error_code=int(error.error),
                         error_message=("The update failed for all features since the following feature had an "
                                        f"error: {error.message}"),
                         results=[])
            per_feature = [R.UpdatableFeatureResult(feature=u.feature, error_code=0, error_message="NONE")
                           for u in request.feature_updates] if version <= 1 else []
            return R(throttle_time_ms=0, error_code=0, error_message=None, results=per_feature)

        def failed(code: Errors, message: str | None) -> UpdateFeaturesResponse:
            return UpdateFeaturesResponse(throttle_time_ms=0, error_code=int(code), error_message=message,
                                          results=[])

        future = self.controller.update_features(updates, upgrade_types, bool(request.validate_only))
        return self._answer(ctx, future, ok, failed)
