"""The broker's lifecycle: registration, heartbeats, fencing and controlled shutdown
(Kafka's ``BrokerLifecycleManager``, KIP-631).

The manager owns the broker's :class:`BrokerState`::

    NOT_RUNNING --start()--> STARTING --heartbeat says caught up--> RECOVERY
        --heartbeat says unfenced--> RUNNING --begin_controlled_shutdown()--> PENDING_CONTROLLED_SHUTDOWN
        --heartbeat says should_shut_down (or the timeout)--> SHUTTING_DOWN

Any state goes to SHUTTING_DOWN on :meth:`begin_shutdown`/:meth:`close`, and when the initial
registration does not succeed within ``initial.broker.registration.timeout.ms``.

What it sends (one request in flight at a time, through a :class:`ControllerSender`, i.e. the
:class:`~kraft_node.broker.controller_channel.ControllerChannel` to the active controller):

* until a registration is accepted: BrokerRegistration with this process's incarnation id (new
  per process start), listeners, supported features, rack, log dir ids (sorted) and the epoch
  of the previous clean shutdown; a refusal or a failure is retried after Kafka's exponential
  backoff (100 ms doubling up to ``broker.session.timeout.ms``, 2% jitter; reset by a success);
* once registered: BrokerHeartbeat with the registration's broker epoch, the loader's last
  applied offset, ``want_fence = not ready_to_unfence``, ``want_shut_down = state is
  PENDING_CONTROLLED_SHUTDOWN``, and the offline log dirs accumulated so far.  Next heartbeat:
  10 ms after an answer while STARTING (a broker with nothing to recover starts quickly), 50 ms
  after the first "not yet" in PENDING_CONTROLLED_SHUTDOWN, else ``broker.heartbeat.interval.ms``;
  after a failure, the backoff.  An event that wants a heartbeat now (ready to unfence, begin
  controlled shutdown, an offline dir) while one is in flight makes the next one immediate.

What the server must call, and when (Kafka's ``BrokerServer.startup``/``shutdown``):

1. :meth:`start` once its listeners are bound (their real ports are registered) and the Raft
   observer is fetching, with ``highest_metadata_offset = loader.last_applied_offset``;
2. await :attr:`initial_catch_up` -- the controller has seen the broker's offset reach (about)
   the log end; then await the loader's first publish (the image is built);
3. :meth:`set_ready_to_unfence` -- only now may the controller unfence the broker (which it also
   does only once the reported offset has reached the registration record's offset); await
   :attr:`initial_unfenced` before reporting the broker ready;
4. on SIGTERM: :meth:`begin_controlled_shutdown` with the shutdown timeout and await
   :attr:`controlled_shutdown` (True: the controller moved the leaders and approved; False: the
   timeout passed -- logged at WARNING naming it -- or the broker was not running), then stop
   the rest and :meth:`close`.

Stale incarnations and epochs, as Kafka does it: the controller refuses a registration from a
new incarnation while the old incarnation's session is live (DUPLICATE_BROKER_REGISTRATION);
the manager logs it and retries with backoff until the old session expires (so a restarted
broker waits out at most ``broker.session.timeout.ms``).  A heartbeat with an epoch that is not
the broker's current one is refused with STALE_BROKER_EPOCH; the manager logs Kafka's warning
and retries with backoff -- it does not re-register on its own (a new epoch is assigned only by
a registration, and Kafka's broker re-registers only when told to: :meth:`resend_broker_registration`,
which the server calls from a BrokerRegistrationTracker-like publisher when the image shows
that this broker's registration needs refreshing).

Time: every delay runs on the injected :class:`Clock` (default: the asyncio loop's), so tests
advance a virtual clock instead of sleeping (Kafka's test uses a MockTime).  Everything runs on
one asyncio loop; the manager must be created on it.  It does not own the channel (the
forwarding of admin writes shares it): :meth:`close` leaves the channel open.
"""
from __future__ import annotations

import asyncio
import enum
import logging
import math
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from kraft_node.broker.controller_channel import (
    ControllerUnavailableError,
    UnsupportedControllerVersionError,
    error_name,
)
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest
from kraft_node.protocol.generated.broker_registration import BrokerRegistrationRequest
from kraft_storage.messages.runtime import Uuid

__all__ = ["BrokerState", "BrokerLifecycleManager", "BrokerLifecycleShutdownError", "Clock", "LoopClock",
           "ControllerSender", "ExponentialBackoff", "SECURITY_PROTOCOLS"]

log = logging.getLogger(__name__)


class BrokerState(enum.IntEnum):
    """Kafka's ``org.apache.kafka.metadata.BrokerState``, with its byte values (the value of the
    ``kafka.server:type=KafkaServer,name=BrokerState`` gauge)."""
    NOT_RUNNING = 0
    STARTING = 1
    RECOVERY = 2
    RUNNING = 3
    PENDING_CONTROLLED_SHUTDOWN = 6
    SHUTTING_DOWN = 7
    UNKNOWN = 127


#: Kafka's SecurityProtocol ids, as a BrokerRegistration listener carries them
SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}

#: Kafka's defaults: initial.broker.registration.timeout.ms, broker.heartbeat.interval.ms,
#: broker.session.timeout.ms
DEFAULT_INITIAL_REGISTRATION_TIMEOUT_MS = 60_000
DEFAULT_HEARTBEAT_INTERVAL_MS = 2_000
DEFAULT_SESSION_TIMEOUT_MS = 9_000
#: heartbeat delays Kafka hard-codes: while STARTING, and after the first "not yet" in controlled shutdown
STARTING_HEARTBEAT_DELAY_S = 0.010
FIRST_SHUTDOWN_WAIT_DELAY_S = 0.050


class BrokerLifecycleShutdownError(Exception):
    """The lifecycle manager shut down before the awaited transition (the registration timed
    out, or the broker is stopping): what :attr:`BrokerLifecycleManager.initial_catch_up` and
    :attr:`BrokerLifecycleManager.initial_unfenced` fail with (Kafka cancels them)."""


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """The time the manager runs on: seconds, and one-shot timers."""

    def monotonic(self) -> float: ...

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> Cancellable: ...


class LoopClock:
    """The running asyncio loop's clock and timers."""

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> Cancellable:
        return asyncio.get_running_loop().call_later(delay_s, fn)


class ControllerSender(Protocol):
    """What the manager needs of the channel to the active controller (``ControllerChannel``)."""

    async def send(self, body: Any, version: int | None = None, *, timeout_s: float | None = None) -> Any: ...


class ExponentialBackoff:
    """Kafka's ``ExponentialBackoff(initial, multiplier, max, jitter)``: ``initial * multiplier **
    attempts`` (the exponent capped where the term reaches ``max``), times a uniform factor in
    ``[1 - jitter, 1 + jitter)``, at most ``max`` (ms)."""

    def __init__(self, initial_ms: int, multiplier: int, max_ms: int, jitter: float,
                 rng: random.Random | None = None) -> None:
        self.initial_ms = min(max_ms, initial_ms)
        self.multiplier = multiplier
        self.max_ms = max_ms
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._exp_max = (math.log(max_ms / max(initial_ms, 1)) / math.log(multiplier)
                         if max_ms > initial_ms else 0.0)

    def backoff_ms(self, attempts: int) -> int:
        if self._exp_max == 0:
            return self.initial_ms
        term = self.initial_ms * self.multiplier ** min(float(attempts), self._exp_max)
        factor = self._rng.uniform(1 - self.jitter, 1 + self.jitter) if self.jitter > 0 else 1.0
        return min(int(factor * term), self.max_ms)


Listener = tuple[str, str, int, int | str]


def _listener(entry: Listener | BrokerRegistrationRequest.Listener) -> BrokerRegistrationRequest.Listener:
    """A registration listener from ``(name, host, port, security protocol id or name)``."""
    if isinstance(entry, BrokerRegistrationRequest.Listener):
        return entry
    name, host, port, protocol = entry
    if isinstance(protocol, str):
        if protocol.upper() not in SECURITY_PROTOCOLS:
            raise ValueError(f"listener {name}: unknown security protocol {protocol!r} "
                             f"(one of {', '.join(SECURITY_PROTOCOLS)})")
        protocol = SECURITY_PROTOCOLS[protocol.upper()]
    if not 0 < int(port) < 65536:
        raise ValueError(f"listener {name}: port {port} is not a bound port (1-65535): register after binding")
    return BrokerRegistrationRequest.Listener(name=name, host=host, port=int(port), security_protocol=int(protocol))


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Mark a failed future's exception as seen (nobody may await it: no asyncio warning)."""
    if not fut.cancelled():
        fut.exception()


class BrokerLifecycleManager:
    """One broker process's lifecycle; see the module doc for the protocol and the server's part.

    ``node_id``: the broker id.  ``heartbeat_interval_ms``, ``session_timeout_ms``,
    ``initial_registration_timeout_ms``: Kafka's ``broker.heartbeat.interval.ms``,
    ``broker.session.timeout.ms`` (the backoff's cap; requests time out after half of it, as
    KAFKA-14392 set) and ``initial.broker.registration.timeout.ms``.  ``clock``: see :class:`Clock`.
    ``shutdown_hook``: called when an offline log dir could not be reported in time (Kafka
    stops the broker).  ``incarnation_id``: for tests; a fresh random one otherwise."""

    def __init__(self, node_id: int, *, heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 initial_registration_timeout_ms: int = DEFAULT_INITIAL_REGISTRATION_TIMEOUT_MS,
                 clock: Clock | None = None, rng: random.Random | None = None,
                 shutdown_hook: Callable[[], None] | None = None, incarnation_id: Uuid | None = None) -> None:
        for key, value in (("broker.heartbeat.interval.ms", heartbeat_interval_ms),
                           ("broker.session.timeout.ms", session_timeout_ms),
                           ("initial.broker.registration.timeout.ms", initial_registration_timeout_ms)):
            if value <= 0:
                raise ValueError(f"{key} must be positive, not {value}")
        self.node_id = node_id
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.initial_registration_timeout_s = initial_registration_timeout_ms / 1000
        #: the deadline given to one registration or heartbeat send (KAFKA-14392: half a session)
        self.request_timeout_s = session_timeout_ms / 2000
        self.clock: Clock = clock if clock is not None else LoopClock()
        self._backoff = ExponentialBackoff(100, 2, session_timeout_ms, 0.02, rng)
        self._shutdown_hook = shutdown_hook
        self.incarnation_id: Uuid = incarnation_id if incarnation_id is not None else Uuid.random()
        self._prefix = f"[BrokerLifecycleManager id={node_id}] "
        loop = asyncio.get_running_loop()
        #: completes when a heartbeat answer first says the broker has caught up (STARTING -> RECOVERY)
        self.initial_catch_up: asyncio.Future[None] = loop.create_future()
        #: completes when the controller first unfences the broker (RECOVERY -> RUNNING)
        self.initial_unfenced: asyncio.Future[None] = loop.create_future()
        #: completes at SHUTTING_DOWN: True if the controller approved a controlled shutdown
        self.controlled_shutdown: asyncio.Future[bool] = loop.create_future()
        for fut in (self.initial_catch_up, self.initial_unfenced):
            fut.add_done_callback(_retrieve)
        self._state = BrokerState.NOT_RUNNING
        self._broker_epoch = -1
        self._failed_attempts = 0
        self._registered = False
        self._initial_registration_succeeded = False
        self._ready_to_unfence = False
        self._in_flight = False
        self._next_immediate = False
        self._got_controlled_shutdown_response = False
        self._approved = False
        #: offline log dir -> True once a heartbeat carrying it was acknowledged
        self._offline_dirs: dict[Uuid, bool] = {}
        self._channel: ControllerSender | None = None
        self._offset: Callable[[], int] = lambda: -1
        self._cluster_id = ""
        self._listeners: list[BrokerRegistrationRequest.Listener] = []
        self._features: dict[str, tuple[int, int]] = {}
        self._rack: str | None = None
        self._log_dirs: list[Uuid] = []
        self._previous_broker_epoch = -1
        self._timers: dict[str, Cancellable] = {}
        self._task: asyncio.Task[None] | None = None
        self._started_at: float | None = None
        self._last_ack_at: float | None = None
        #: the last request sent (tests and debugging read it)
        self.last_request: Any = None

    # ------------------------------------------------------------ read by anyone
    @property
    def state(self) -> BrokerState:
        return self._state

    @property
    def broker_epoch(self) -> int:
        """The epoch of the accepted registration, -1 before one."""
        return self._broker_epoch

    @property
    def registered(self) -> bool:
        return self._registered

    @property
    def offline_dirs(self) -> dict[Uuid, bool]:
        """Offline log dirs reported so far -> whether a heartbeat carrying them was acknowledged."""
        return dict(self._offline_dirs)

    def state_value(self) -> float:
        """The BrokerState gauge: the state's byte value."""
        return float(self._state.value)

    def time_since_last_heartbeat_ack_ms(self) -> float:
        """Milliseconds since the controller last acknowledged a heartbeat; before the first,
        since :meth:`start` (so a broker that never reaches a controller shows a growing value);
        NaN before :meth:`start`."""
        since = self._last_ack_at if self._last_ack_at is not None else self._started_at
        if since is None:
            return math.nan
        return (self.clock.monotonic() - since) * 1000

    # ------------------------------------------------------------ inputs
    def start(self, highest_metadata_offset: Callable[[], int], channel: ControllerSender, *, cluster_id: str,
              listeners: Sequence[Listener | BrokerRegistrationRequest.Listener],
              features: dict[str, tuple[int, int]], rack: str | None = None, log_dir_ids: Iterable[Uuid] = (),
              previous_broker_epoch: int = -1) -> None:
        """Go to STARTING and send the registration (see the module doc).  ``listeners``:
        ``(name, host, port, security protocol)`` of the advertised listeners, ports bound.
        ``features``: name -> (min, max) supported level.  ``previous_broker_epoch``: the
        epoch of the last clean shutdown, -1 if unknown."""
        if self._state != BrokerState.NOT_RUNNING:
            raise RuntimeError(f"{self._prefix}start() in state {self._state.name}: it was started already")
        if not listeners:
            raise ValueError("a broker registers at least one listener")
        self._listeners = [_listener(entry) for entry in listeners]
        self._features = {str(name): (int(lo), int(hi)) for name, (lo, hi) in features.items()}
        for name, (lo, hi) in self._features.items():
            if lo > hi:
                raise ValueError(f"feature {name}: min supported {lo} > max supported {hi}")
        self._offset = highest_metadata_offset
        self._channel = channel
        self._cluster_id = cluster_id
        self._rack = rack
        self._log_dirs = sorted(log_dir_ids, key=str)
        self._previous_broker_epoch = previous_broker_epoch
        self._state = BrokerState.STARTING
        self._started_at = self.clock.monotonic()
        self._after("initialRegistrationTimeout", self.initial_registration_timeout_s, self._registration_timeout)
        self._send_registration()
        log.info("%sIncarnation %s of broker %d in cluster %s is now STARTING.", self._prefix,
                 self.incarnation_id, self.node_id, cluster_id)

    def set_ready_to_unfence(self) -> asyncio.Future[None]:
        """The loader has published the image the controller reported caught up to: from the
        next heartbeat on, ask to be unfenced.  Returns :attr:`initial_unfenced`."""
        if not self._stopped():
            self._ready_to_unfence = True
            self._schedule_immediately()
        return self.initial_unfenced

    def propagate_directory_failure(self, directory: Uuid, timeout_ms: int) -> None:
        """Report an offline log dir in every heartbeat from now on; if no heartbeat carrying
        it is acknowledged within ``timeout_ms`` (``log.dir.failure.timeout.ms``), call the
        shutdown hook (Kafka stops the broker)."""
        if self._stopped():
            return
        self._offline_dirs.setdefault(directory, False)
        if self._registered:
            self._schedule_immediately()
        self._after(f"offlineDirFailure-{directory}", timeout_ms / 1000, lambda: self._offline_dir_deadline(directory))

    def resend_broker_registration(self) -> None:
        """Register again (a new epoch): Kafka's ``resendBrokerRegistrationUnlessZkMode``, called
        when the image shows this broker's registration needs refreshing."""
        if self._stopped() or self._state == BrokerState.NOT_RUNNING:
            return
        self._registered = False
        self._schedule_immediately()

    def begin_controlled_shutdown(self, timeout_ms: int | None = None) -> asyncio.Future[bool]:
        """Ask the controller to move this broker's leaders away, then shut down when it says
        so.  From RUNNING only; in any other state the manager shuts down at once (Kafka).
        ``timeout_ms``: after it, shut down anyway (logged at WARNING).  Returns
        :attr:`controlled_shutdown`."""
        if self._state == BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            log.info("%sAttempted to enter pending controlled shutdown state, but we are already in that state.",
                     self._prefix)
        elif self._state == BrokerState.RUNNING:
            log.info("%sBeginning controlled shutdown.", self._prefix)
            self._state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
            self._schedule_immediately()  # let the controller start moving leaders now
            if timeout_ms is not None:
                self._after("controlledShutdownTimeout", timeout_ms / 1000,
                            lambda: self._controlled_shutdown_timeout(timeout_ms))
        else:
            log.info("%sSkipping controlled shutdown because we are in state %s.", self._prefix, self._state.name)
            self.begin_shutdown()
        return self.controlled_shutdown

    def begin_shutdown(self, reason: str = "the broker is stopping") -> None:
        """Go to SHUTTING_DOWN now: no more requests; the pending futures complete (the
        catch-up and unfence ones with :class:`BrokerLifecycleShutdownError`)."""
        if self._state == BrokerState.SHUTTING_DOWN:
            return
        log.info("%sTransitioning from %s to %s.", self._prefix, self._state.name, BrokerState.SHUTTING_DOWN.name)
        self._state = BrokerState.SHUTTING_DOWN
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        if not self.controlled_shutdown.done():
            self.controlled_shutdown.set_result(self._approved)
        for fut in (self.initial_catch_up, self.initial_unfenced):
            if not fut.done():
                fut.set_exception(BrokerLifecycleShutdownError(f"{self._prefix.strip()} shut down: {reason}"))

    def close(self) -> None:
        """Shut down (if not yet) and cancel every timer and the request in flight."""
        self.begin_shutdown("closed")

    # ------------------------------------------------------------ timers
    def _after(self, name: str, delay_s: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` after ``delay_s`` on the clock, replacing a timer of the same name
        (Kafka's ``scheduleDeferred`` with a tag)."""
        old = self._timers.pop(name, None)
        if old is not None:
            old.cancel()

        def fire() -> None:
            if self._timers.get(name) is handle:
                del self._timers[name]
            fn()
        handle = self.clock.call_later(max(0.0, delay_s), fire)
        self._timers[name] = handle

    def _stopped(self) -> bool:
        return self._state == BrokerState.SHUTTING_DOWN

    def _schedule_immediately(self) -> None:
        self._schedule(0.0)

    def _schedule_after_failure(self) -> None:
        delay_ms = self._backoff.backoff_ms(self._failed_attempts)
        self._failed_attempts += 1
        self._next_immediate = False  # never straight again after a failure
        self._schedule(delay_ms / 1000)

    def _schedule_after_success(self) -> None:
        self._schedule(self.heartbeat_interval_s)

    def _schedule(self, delay_s: float) -> None:
        if self._stopped():
            return
        if self._next_immediate:
            delay_s = 0.0
        self._next_immediate = False
        self._after("communication", delay_s, self._communicate)

    def _communicate(self) -> None:
        if self._stopped():
            return
        if self._in_flight:
            self._next_immediate = True  # the answer's reschedule will be immediate
        elif self._registered:
            self._send_heartbeat()
        else:
            self._send_registration()

    def _registration_timeout(self) -> None:
        if not self._initial_registration_succeeded:
            log.error("%sShutting down because we were unable to register with the controller quorum.",
                      self._prefix)
            limit_ms = self.initial_registration_timeout_s * 1000
            self.begin_shutdown("unable to register with the controller quorum within "
                                f"initial.broker.registration.timeout.ms ({limit_ms:g} ms)")

    def _controlled_shutdown_timeout(self, timeout_ms: int) -> None:
        if self._state == BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            log.warning("%sTimed out waiting for the controller to approve controlled shutdown after %d ms; "
                        "shutting down without it.", self._prefix, timeout_ms)
            self.begin_shutdown(f"controlled shutdown not approved within {timeout_ms} ms")

    def _offline_dir_deadline(self, directory: Uuid) -> None:
        if not self._offline_dirs.get(directory, False):
            log.error("%sShutting down because couldn't communicate offline log dir %s with controllers",
                      self._prefix, directory)
            if self._shutdown_hook is not None:
                self._shutdown_hook()

    # ------------------------------------------------------------ requests
    def _exchange(self, request: Any, on_answer: Callable[[Any, BaseException | None], None]) -> None:
        """Send ``request`` in a task; ``on_answer(response, None)`` or ``(None, error)`` runs
        when it ends (not if the manager shut down meanwhile: the task is cancelled)."""
        channel = self._channel
        assert channel is not None, "start() sets the channel"
        self._in_flight = True
        self.last_request = request

        async def run() -> None:
            try:
                response = await channel.send(request, timeout_s=self.request_timeout_s)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - every failure is logged and retried by on_answer
                self._task = None
                self._in_flight = False
                on_answer(None, exc)
            else:
                self._task = None
                self._in_flight = False
                on_answer(response, None)
        self._task = asyncio.get_running_loop().create_task(run(), name=f"broker-{self.node_id}-lifecycle")

    def registration_request(self) -> BrokerRegistrationRequest:
        """The BrokerRegistration this incarnation sends (the same every time)."""
        return BrokerRegistrationRequest(
            broker_id=self.node_id, cluster_id=self._cluster_id, incarnation_id=self.incarnation_id,
            listeners=list(self._listeners),
            features=[BrokerRegistrationRequest.Feature(name=name, min_supported_version=lo,
                                                        max_supported_version=hi)
                      for name, (lo, hi) in sorted(self._features.items())],
            rack=self._rack, is_migrating_zk_broker=False, log_dirs=list(self._log_dirs),
            previous_broker_epoch=self._previous_broker_epoch)

    def _send_registration(self) -> None:
        request = self.registration_request()
        log.debug("%sSending broker registration %s", self._prefix, request)
        self._exchange(request, self._on_registration_answer)

    def _on_registration_answer(self, response: Any, exc: BaseException | None) -> None:
        if self._stopped():
            return
        if exc is not None:
            if isinstance(exc, ControllerUnavailableError):
                log.info("%sUnable to register the broker because the RPC got timed out before it could be sent: %s",
                         self._prefix, exc)
            elif isinstance(exc, UnsupportedControllerVersionError):
                log.error("%sUnable to register broker %d because of an API version problem: %s", self._prefix,
                          self.node_id, exc)
            else:
                log.warning("%sUnable to register broker %d: %s", self._prefix, self.node_id, exc)
            self._schedule_after_failure()
            return
        if response.error_code == 0:
            self._failed_attempts = 0
            self._broker_epoch = int(response.broker_epoch)
            self._registered = True
            self._initial_registration_succeeded = True
            log.info("%sSuccessfully registered broker %d with broker epoch %d", self._prefix, self.node_id,
                     self._broker_epoch)
            self._schedule_immediately()  # the first heartbeat at once
        else:
            log.info("%sUnable to register broker %d because the controller returned error %s", self._prefix,
                     self.node_id, error_name(response.error_code))
            self._schedule_after_failure()

    def heartbeat_request(self) -> BrokerHeartbeatRequest:
        """The next BrokerHeartbeat (the offset is read now)."""
        return BrokerHeartbeatRequest(broker_id=self.node_id, broker_epoch=self._broker_epoch,
                                      current_metadata_offset=int(self._offset()),
                                      want_fence=not self._ready_to_unfence,
                                      want_shut_down=self._state == BrokerState.PENDING_CONTROLLED_SHUTDOWN,
                                      offline_log_dirs=list(self._offline_dirs))

    def _send_heartbeat(self) -> None:
        request = self.heartbeat_request()
        sent_dirs = list(request.offline_log_dirs)
        log.debug("%sSending broker heartbeat %s", self._prefix, request)
        self._exchange(request, lambda response, exc: self._on_heartbeat_answer(response, exc, sent_dirs))

    def _on_heartbeat_answer(self, response: Any, exc: BaseException | None, sent_dirs: list[Uuid]) -> None:
        if self._stopped():
            log.info("%sThe broker is SHUTTING_DOWN. Ignoring heartbeat response.", self._prefix)
            return
        if exc is not None:
            if isinstance(exc, ControllerUnavailableError):
                log.info("%sUnable to send a heartbeat because the RPC got timed out before it could be sent: %s",
                         self._prefix, exc)
            elif isinstance(exc, UnsupportedControllerVersionError):
                log.error("%sUnable to send broker heartbeat for %d because of an API version problem: %s",
                          self._prefix, self.node_id, exc)
            else:
                log.warning("%sUnable to send broker heartbeat for %d. Retrying. (%s)", self._prefix, self.node_id,
                            exc)
            self._schedule_after_failure()
            return
        if response.error_code != 0:
            log.warning("%sBroker %d sent a heartbeat request but received error %s.", self._prefix, self.node_id,
                        error_name(response.error_code))
            self._schedule_after_failure()
            return
        self._failed_attempts = 0
        self._last_ack_at = self.clock.monotonic()
        for directory in sent_dirs:
            self._offline_dirs[directory] = True
        state = self._state
        if state == BrokerState.STARTING:
            if response.is_caught_up:
                log.info("%sThe broker has caught up. Transitioning from STARTING to RECOVERY.", self._prefix)
                self._state = BrokerState.RECOVERY
                if not self.initial_catch_up.done():
                    self.initial_catch_up.set_result(None)
            else:
                log.debug("%sThe broker is STARTING. Still waiting to catch up with cluster metadata.", self._prefix)
            self._schedule(STARTING_HEARTBEAT_DELAY_S)
        elif state == BrokerState.RECOVERY:
            if not response.is_fenced:
                log.info("%sThe broker has been unfenced. Transitioning from RECOVERY to RUNNING.", self._prefix)
                self._state = BrokerState.RUNNING
                if not self.initial_unfenced.done():
                    self.initial_unfenced.set_result(None)
            else:
                log.info("%sThe broker is in RECOVERY.", self._prefix)
            self._schedule_after_success()
        elif state == BrokerState.RUNNING:
            log.debug("%sThe broker is RUNNING. Processing heartbeat response.", self._prefix)
            self._schedule_after_success()
        elif state == BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            if response.should_shut_down:
                log.info("%sThe controller has asked us to exit controlled shutdown.", self._prefix)
                self._approved = True
                self.begin_shutdown("the controller approved the controlled shutdown")
            else:
                log.info("%sThe broker is in PENDING_CONTROLLED_SHUTDOWN state, still waiting for the active "
                         "controller.", self._prefix)
                if not self._got_controlled_shutdown_response:
                    self._schedule(FIRST_SHUTDOWN_WAIT_DELAY_S)  # a quick shutdown is seen sooner
                else:
                    self._schedule_after_success()
            self._got_controlled_shutdown_response = True
        else:
            log.error("%sUnexpected broker state %s", self._prefix, state.name)
            self._schedule_after_success()
