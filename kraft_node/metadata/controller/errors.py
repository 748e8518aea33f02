"""The controller's errors: API errors (a Kafka error code and message, answered to the
caller) and faults (a replay that cannot be applied: fatal, never skipped).

Kafka throws an ``ApiException`` subclass per code; here one :class:`ApiError` carries
the code (:class:`kraft_node.protocol.errors.Errors`) and the message, so an RPC handler
copies both into its response.  The few kinds code needs to catch by type have a subclass.
"""
from __future__ import annotations

from kraft_node.protocol.errors import Errors


class ApiError(Exception):
    """An error answered to the caller: ``error`` is Kafka's code, ``message`` its text."""

    def __init__(self, error: Errors, message: str | None = None):
        super().__init__(message if message is not None else error.name)
        self.error = Errors(error)
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.error.name}, {self.message!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ApiError) and (self.error, self.message) == (other.error, other.message)

    def __hash__(self) -> int:
        return hash((self.error, self.message))


class NotControllerError(ApiError):
    """This node is not the active controller (Kafka's NotControllerException)."""

    def __init__(self, message: str | None = None):
        super().__init__(Errors.NOT_CONTROLLER, message)


class InvalidRequestError(ApiError):
    def __init__(self, message: str | None = None):
        super().__init__(Errors.INVALID_REQUEST, message)


class ControllerTimeoutError(ApiError):
    """An event's deadline passed before it ran (Kafka's TimeoutException: REQUEST_TIMED_OUT)."""

    def __init__(self, message: str | None = None):
        super().__init__(Errors.REQUEST_TIMED_OUT, message)


class ReplayError(Exception):
    """A record that cannot be applied to the controller's state.  Fatal on every controller:
    applying it differently, or skipping it, would make the replicas diverge
    (Kafka's fatal fault handler)."""


class EventQueueClosedError(Exception):
    """The event queue is shutting down; the event was not run (Kafka's
    RejectedExecutionException)."""
