"""Fault handlers for the loader and its publishers (Kafka's ``FaultHandler`` family).

Why a handler and not an exception: a record the loader cannot replay is not the caller's
error (the Raft driver delivered a committed batch; there is nobody to raise to).  What to do
is the node's decision: a controller must stop (its state would diverge from the quorum's), a
broker may keep serving the last good image and count the error.  So the loader reports every
fault to an injected handler with Kafka's message -- which names the offset -- and the
handler returns the exception a caller may raise (Kafka's ``RuntimeException
handleFault(message, cause)``); the same shape as the controller's ``fatal_fault_handler``.

* :class:`LoggingFaultHandler` -- logs at ERROR and runs an action (Kafka's
  ``LoggingFaultHandler``): the default.
* :class:`RecordingFaultHandler` -- keeps the first fault, for tests and tools (Kafka's
  ``MockFaultHandler``: its messages are prefixed by the handler's name, and every call returns
  the *first* fault, so a test sees the fault that started a cascade).
"""
from __future__ import annotations

import logging
from typing import Callable

__all__ = ["FaultHandler", "FaultHandlerError", "LoggingFaultHandler", "RecordingFaultHandler"]

log = logging.getLogger("kraft.metadata.loader")

#: ``handler(message, cause) -> the exception describing the fault`` (never raises by contract;
#: a handler that does raise propagates to the loader's caller, which is how a test may stop at once).
FaultHandler = Callable[[str, BaseException | None], BaseException]


class FaultHandlerError(RuntimeError):
    """A fault, as a fault handler describes it (Kafka's ``FaultHandlerException``); ``__cause__``
    is the exception that caused it, when there was one."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.__cause__ = cause

    @property
    def cause(self) -> BaseException | None:
        return self.__cause__


class LoggingFaultHandler:
    """Logs ``Encountered <kind> fault: <message>`` (with the cause's traceback) and runs ``action``
    (e.g. count the error in a metric, or disable snapshots); an action that fails is logged."""

    def __init__(self, kind: str, action: Callable[[], None] | None = None) -> None:
        self.kind = kind
        self.action = action

    def __call__(self, message: str, cause: BaseException | None = None) -> BaseException:
        log.error("Encountered %s fault: %s", self.kind, message, exc_info=cause)
        if self.action is not None:
            try:
                self.action()
            except Exception:
                log.exception("Failed to run the %s fault handler's action", self.kind)
        return FaultHandlerError(message, cause)


class RecordingFaultHandler:
    """Keeps every fault and returns the first (Kafka's ``MockFaultHandler``).

    Messages read ``<name>: <message>`` and, with a cause, ``<name>: <message>: <cause's message>``,
    as Kafka's, so Kafka's tests' expected texts hold here word for word."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.faults: list[FaultHandlerError] = []

    def __call__(self, message: str, cause: BaseException | None = None) -> BaseException:
        text = f"{self.name}: {message}" if cause is None else f"{self.name}: {message}: {cause}"
        log.error("Encountered %s fault: %s", self.name, message, exc_info=cause)
        self.faults.append(FaultHandlerError(text, cause))
        return self.faults[0]

    @property
    def first(self) -> FaultHandlerError | None:
        return self.faults[0] if self.faults else None

    def maybe_rethrow_first(self) -> None:
        """Raise the first fault, if there was one (Kafka's ``maybeRethrowFirstException``)."""
        if self.faults:
            raise self.faults[0]
