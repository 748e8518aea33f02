"""Broker liveness: the soft state of the active controller (Kafka's BrokerHeartbeatTracker,
BrokerHeartbeatManager, BrokerControlState(s) and UsableBroker).

Soft state is state that never enters the metadata log: when each broker last sent a
heartbeat, the metadata offset it last reported, the offset at which its controlled shutdown
may complete.  Keeping it off the log keeps ``__cluster_metadata`` small; the price is that a
controller that has just become active knows no contact times, so it gives every registered
broker a fresh session (:meth:`ClusterControlManager.activate`) and may fence a broker that died
around the failover only one session timeout later.  Only the active controller has these
objects; a standby has none (the :class:`ClusterControlManager` drops them on ``deactivate``).

Two parts, for the reason Kafka split them (KAFKA-15019):

* :class:`BrokerHeartbeatTracker` -- the last contact time of each ``(broker id, broker
  epoch)``.  The RPC path writes it *before* it queues the heartbeat event, so a controller
  whose event loop is backed up never fences a broker that is in fact heartbeating.  In this
  asyncio process that is a plain dict write from the network handler (one thread, no lock);
  Kafka needs a ConcurrentHashMap because its handler threads are not the controller thread.
  Keyed by epoch too, so the expiry of an old incarnation's session can never fence the new
  one (the fencing task checks the epoch against the registration).
* :class:`BrokerHeartbeatManager` -- per broker: fenced or not, the last reported metadata
  offset, the controlled-shutdown offset; the *active* set (unfenced and not shutting down,
  ordered by reported offset) whose lowest offset gates a controlled shutdown; and
  :meth:`~BrokerHeartbeatManager.calculate_next_broker_state`, the broker state machine.

Time is read only through the ``clock_ms`` callable given (monotonic milliseconds; the
simulator's virtual clock in tests).
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterator, NamedTuple

# UsableBroker lives with the placer that reads it; re-exported here for this module's callers.
from kraft_node.metadata.placement.model import UsableBroker as UsableBroker

log = logging.getLogger("kraft.controller.heartbeats")

#: Kafka's ``broker.session.timeout.ms`` default (``ClusterControlManager.DEFAULT_SESSION_TIMEOUT_NS``).
DEFAULT_SESSION_TIMEOUT_MS = 9_000

#: Kafka's ``Long.MAX_VALUE``: the lowest active offset when no broker is active (so any
#: controlled shutdown offset is at or below it).
NO_ACTIVE_OFFSET = (1 << 63) - 1


class BrokerIdAndEpoch(NamedTuple):
    """One broker session: a broker id and the epoch its registration was given."""
    id: int
    epoch: int


class BrokerControlState(enum.Enum):
    """Where a broker stands, as the heartbeat state machine sees it.

    ``fenced``: the broker may not lead or be in an ISR.  ``should_shut_down``: the
    heartbeat reply tells it to exit.  ``in_controlled_shutdown``: it is moving its
    leaderships away before it exits."""

    FENCED = "FENCED"
    UNFENCED = "UNFENCED"
    CONTROLLED_SHUTDOWN = "CONTROLLED_SHUTDOWN"
    SHUTDOWN_NOW = "SHUTDOWN_NOW"

    @property
    def fenced(self) -> bool:
        return self is BrokerControlState.FENCED or self is BrokerControlState.SHUTDOWN_NOW

    @property
    def should_shut_down(self) -> bool:
        return self is BrokerControlState.SHUTDOWN_NOW

    @property
    def in_controlled_shutdown(self) -> bool:
        return self is BrokerControlState.CONTROLLED_SHUTDOWN


@dataclass(frozen=True, slots=True)
class BrokerControlStates:
    """The state a broker was in when its heartbeat arrived and the one it moves to.
    A change (``current is not next``) is what produces records."""
    current: BrokerControlState
    next: BrokerControlState


_FENCED = BrokerControlState.FENCED
_UNFENCED = BrokerControlState.UNFENCED
_CONTROLLED_SHUTDOWN = BrokerControlState.CONTROLLED_SHUTDOWN
_SHUTDOWN_NOW = BrokerControlState.SHUTDOWN_NOW

#: Every (current, next) pair, built once: the pair is immutable, and a heartbeat needs one
#: (building a frozen dataclass costs ~1 us; the steady state is UNFENCED -> UNFENCED).
_TRANSITIONS = {(c, n): BrokerControlStates(c, n) for c in BrokerControlState for n in BrokerControlState}
_FENCED_STAYS = _TRANSITIONS[_FENCED, _FENCED]
_FENCED_UNFENCES = _TRANSITIONS[_FENCED, _UNFENCED]
_FENCED_SHUTS_DOWN = _TRANSITIONS[_FENCED, _SHUTDOWN_NOW]
_UNFENCED_STAYS = _TRANSITIONS[_UNFENCED, _UNFENCED]
_UNFENCED_FENCES = _TRANSITIONS[_UNFENCED, _FENCED]
_UNFENCED_SHUTS_DOWN = _TRANSITIONS[_UNFENCED, _SHUTDOWN_NOW]
_UNFENCED_ENTERS_SHUTDOWN = _TRANSITIONS[_UNFENCED, _CONTROLLED_SHUTDOWN]
_SHUTDOWN_WAITS = _TRANSITIONS[_CONTROLLED_SHUTDOWN, _CONTROLLED_SHUTDOWN]
_SHUTDOWN_COMPLETES = _TRANSITIONS[_CONTROLLED_SHUTDOWN, _SHUTDOWN_NOW]


class BrokerHeartbeatTracker:
    """Last contact time per broker session, and their expiry.

    Invariant: an entry exists only for a session that heartbeated (or was given a fresh
    session on activation) and has not been removed by :meth:`maybe_remove_expired` or
    :meth:`remove_session`.  A session is expired when ``now > t and t + timeout < now``
    (Kafka's test: a contact time in the future is never expired)."""

    __slots__ = ("_clock_ms", "session_timeout_ms", "_contact_times")

    def __init__(self, clock_ms: Callable[[], int], session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS):
        self._clock_ms = clock_ms
        self.session_timeout_ms = session_timeout_ms
        self._contact_times: dict[tuple[int, int], int] = {}  # (id, epoch): BrokerIdAndEpoch keys match

    def now_ms(self) -> int:
        """The tracker's clock reading."""
        return self._clock_ms()

    def update_contact_time(self, broker_id: int, broker_epoch: int, now_ms: int | None = None) -> None:
        """Record that the session ``(broker_id, broker_epoch)`` was heard from at ``now_ms``
        (default: the clock).  Called by the RPC path before the heartbeat event is queued."""
        # A plain tuple key: it hashes and compares equal to the BrokerIdAndEpoch the readers
        # look up and return, without the named tuple's constructor on every heartbeat.
        self._contact_times[(broker_id, broker_epoch)] = self._clock_ms() if now_ms is None else now_ms

    def contact_time(self, broker_id: int, broker_epoch: int) -> int | None:
        """The last contact time of the session, or None if none is known."""
        return self._contact_times.get(BrokerIdAndEpoch(broker_id, broker_epoch))

    def is_expired(self, time_ms: int, now_ms: int) -> bool:
        """Whether a contact at ``time_ms`` is outside the session window at ``now_ms``."""
        return now_ms > time_ms and time_ms + self.session_timeout_ms < now_ms

    def maybe_remove_expired(self, now_ms: int | None = None) -> BrokerIdAndEpoch | None:
        """Remove and return one expired session, or None if none is expired.  One at a time
        so the controller can fence each broker, and let that be seen, before the next."""
        now = self._clock_ms() if now_ms is None else now_ms
        for key, time_ms in self._contact_times.items():
            if self.is_expired(time_ms, now):
                del self._contact_times[key]
                return BrokerIdAndEpoch(*key)
        return None

    def remove_all_expired(self, now_ms: int | None = None) -> list[BrokerIdAndEpoch]:
        """Remove and return every expired session, in the order :meth:`maybe_remove_expired`
        would hand them out one by one.  A zone going dark expires ~all its brokers' sessions
        within one heartbeat interval; fencing them one per task run (Kafka's rule) made the
        fencing of a 100-broker rack a 100-run sequence, each run's partition changes
        scattered over every topic (benchmarks/results/s19/zonal.md)."""
        now = self._clock_ms() if now_ms is None else now_ms
        expired = [key for key, time_ms in self._contact_times.items() if self.is_expired(time_ms, now)]
        for key in expired:
            del self._contact_times[key]
        return [BrokerIdAndEpoch(*key) for key in expired]

    def remove_session(self, broker_id: int, broker_epoch: int) -> None:
        """Forget a session (the broker was told to shut down, or its registration is gone)."""
        self._contact_times.pop(BrokerIdAndEpoch(broker_id, broker_epoch), None)

    def has_valid_session(self, broker_id: int, broker_epoch: int, now_ms: int | None = None) -> bool:
        """True only if the session is known and not expired."""
        time_ms = self._contact_times.get(BrokerIdAndEpoch(broker_id, broker_epoch))
        if time_ms is None:
            return False
        return not self.is_expired(time_ms, self._clock_ms() if now_ms is None else now_ms)

    def sessions(self) -> dict[BrokerIdAndEpoch, int]:
        """A copy of every known session and its contact time (metrics, tests)."""
        return {BrokerIdAndEpoch(*key): t for key, t in self._contact_times.items()}


class _BrokerHeartbeatState:
    """One broker's soft state.  ``controlled_shutdown_offset`` is -1 unless the broker is in
    controlled shutdown (then it is the offset every active broker must reach first)."""

    __slots__ = ("id", "fenced", "metadata_offset", "controlled_shutdown_offset")

    def __init__(self, broker_id: int, fenced: bool):
        self.id = broker_id
        self.fenced = fenced
        self.metadata_offset = -1
        self.controlled_shutdown_offset = -1

    @property
    def shutting_down(self) -> bool:
        return self.controlled_shutdown_offset >= 0

    def __repr__(self) -> str:
        return (f"BrokerHeartbeatState(id={self.id}, fenced={self.fenced}, metadata_offset="
                f"{self.metadata_offset}, controlled_shutdown_offset={self.controlled_shutdown_offset})")


class BrokerHeartbeatManager:
    """The heartbeat-driven view of every registered broker, on the active controller.

    Invariants:

    * every registered broker has a state here (the :class:`ClusterControlManager` calls
      :meth:`register` on replay and on activation, :meth:`remove` when it unregisters);
    * ``_active`` holds exactly the brokers that are unfenced and not shutting down, each with
      its last reported metadata offset: the brokers a controlled shutdown waits for.

    Kafka keeps the active set in a TreeSet ordered by (offset, id) to read its lowest offset.
    Here it is a dict and the lowest offset is a ``min`` taken only when a broker in
    controlled shutdown heartbeats, so the common heartbeat (a :meth:`touch`) stays O(1);
    :meth:`active_brokers` gives the ordered view."""

    def __init__(self, clock_ms: Callable[[], int], session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS):
        self.tracker = BrokerHeartbeatTracker(clock_ms, session_timeout_ms)
        self._brokers: dict[int, _BrokerHeartbeatState] = {}
        self._active: dict[int, int] = {}

    # -- sessions (delegated to the tracker) --------------------------------------------------

    def has_valid_session(self, broker_id: int, broker_epoch: int) -> bool:
        return self.tracker.has_valid_session(broker_id, broker_epoch)

    def remove_session(self, broker_id: int, broker_epoch: int) -> None:
        self.tracker.remove_session(broker_id, broker_epoch)

    # -- per-broker state ---------------------------------------------------------------------

    def _state_or_raise(self, broker_id: int) -> _BrokerHeartbeatState:
        broker = self._brokers.get(broker_id)
        if broker is None:
            raise RuntimeError(f"Broker {broker_id} is not registered.")
        return broker

    def is_registered(self, broker_id: int) -> bool:
        return broker_id in self._brokers

    def is_fenced(self, broker_id: int) -> bool:
        """The soft fenced flag (True for an unknown broker)."""
        broker = self._brokers.get(broker_id)
        return broker is None or broker.fenced

    def metadata_offset(self, broker_id: int) -> int:
        """The metadata offset the broker last reported (-1 if none yet)."""
        return self._state_or_raise(broker_id).metadata_offset

    def controlled_shutdown_offset(self, broker_id: int) -> int | None:
        """The offset the broker's controlled shutdown waits for, or None if it is not in one."""
        broker = self._brokers.get(broker_id)
        if broker is None or broker.controlled_shutdown_offset == -1:
            return None
        return broker.controlled_shutdown_offset

    def register(self, broker_id: int, fenced: bool) -> None:
        """Track ``broker_id`` if it is new, and set its fencing state.  A known broker keeps
        the metadata offset it last reported.  (Kafka resets the offset to -1 when the fencing
        state does not change, which would hold every controlled shutdown back until the broker
        heartbeats again; a reported offset stays true until the broker reports another.)"""
        broker = self._brokers.get(broker_id)
        if broker is None:
            broker = _BrokerHeartbeatState(broker_id, fenced)
            self._brokers[broker_id] = broker
        self.touch(broker_id, fenced, broker.metadata_offset)

    def touch(self, broker_id: int, fenced: bool, metadata_offset: int) -> None:
        """Set a registered broker's fencing state and reported offset.  A fenced broker leaves
        controlled shutdown (its next heartbeat then gets SHUTDOWN_NOW).  RuntimeError if the
        broker is not registered."""
        broker = self._brokers.get(broker_id)  # (_state_or_raise and shutting_down, inlined: per heartbeat)
        if broker is None:
            raise RuntimeError(f"Broker {broker_id} is not registered.")
        broker.fenced = fenced
        broker.metadata_offset = metadata_offset
        if fenced:
            broker.controlled_shutdown_offset = -1
        if fenced or broker.controlled_shutdown_offset >= 0:
            self._active.pop(broker_id, None)
        else:
            self._active[broker_id] = metadata_offset

    def fence(self, broker_id: int) -> None:
        """Mark a broker fenced (its session timed out).  Unknown brokers are ignored."""
        broker = self._brokers.get(broker_id)
        if broker is not None:
            broker.fenced = True
            self._active.pop(broker_id, None)

    def remove(self, broker_id: int) -> None:
        """Forget a broker (unregistered, or replaced by a new incarnation)."""
        if self._brokers.pop(broker_id, None) is not None:
            self._active.pop(broker_id, None)

    def update_controlled_shutdown_offset(self, broker_id: int, controlled_shutdown_offset: int) -> None:
        """Put an unfenced broker in controlled shutdown, to complete once every active broker
        has reached ``controlled_shutdown_offset`` (the end of the batch holding the records
        that move its leaderships).  Set once: a later call keeps the first offset, since the
        broker's own records are in the first batch.  RuntimeError for a fenced broker."""
        broker = self._state_or_raise(broker_id)
        if broker.fenced:
            raise RuntimeError("Fenced brokers cannot enter controlled shutdown.")
        self._active.pop(broker_id, None)
        if broker.controlled_shutdown_offset < 0:
            broker.controlled_shutdown_offset = controlled_shutdown_offset
            log.debug("Updated the controlled shutdown offset for broker %d to %d.",
                      broker_id, controlled_shutdown_offset)

    def raise_controlled_shutdown_offset(self, broker_id: int, controlled_shutdown_offset: int) -> None:
        """Move a broker's controlled shutdown offset up to ``controlled_shutdown_offset`` (never
        down), putting it in controlled shutdown if it was not: leaderships it led moved in a
        later batch than the first, and the broker may only shut down once every active broker
        has read that one too.  RuntimeError for a fenced broker."""
        broker = self._state_or_raise(broker_id)
        if broker.fenced:
            raise RuntimeError("Fenced brokers cannot enter controlled shutdown.")
        self._active.pop(broker_id, None)
        if controlled_shutdown_offset > broker.controlled_shutdown_offset:
            broker.controlled_shutdown_offset = controlled_shutdown_offset
            log.debug("Raised the controlled shutdown offset for broker %d to %d.", broker_id,
                      controlled_shutdown_offset)

    # -- the active set -----------------------------------------------------------------------

    def lowest_active_offset(self) -> int:
        """The lowest metadata offset an active broker reported, or NO_ACTIVE_OFFSET if none is
        active."""
        return min(self._active.values(), default=NO_ACTIVE_OFFSET)

    def active_brokers(self) -> list[tuple[int, int]]:
        """``(metadata offset, broker id)`` of every active broker, lowest offset first."""
        return sorted((offset, broker_id) for broker_id, offset in self._active.items())

    def usable_brokers(self, id_to_rack: Callable[[int], str | None]) -> Iterator[UsableBroker]:
        """Every registered broker not in controlled shutdown, for replica placement (fenced
        ones included: the placer may use them as followers)."""
        for broker in self._brokers.values():
            if not broker.shutting_down:
                yield UsableBroker(broker.id, id_to_rack(broker.id), broker.fenced)

    # -- the state machine --------------------------------------------------------------------

    def current_broker_state(self, broker_id: int) -> BrokerControlState:
        broker = self._state_or_raise(broker_id)
        if broker.shutting_down:
            return BrokerControlState.CONTROLLED_SHUTDOWN
        return BrokerControlState.FENCED if broker.fenced else BrokerControlState.UNFENCED

    def calculate_next_broker_state(self, broker_id: int, request: Any, register_broker_record_offset: int,
                                    has_leaderships: Callable[[], bool]) -> BrokerControlStates:
        """Where a heartbeat takes its broker (``request``: a BrokerHeartbeatRequest's
        ``want_fence``, ``want_shut_down``, ``current_metadata_offset``):

        * FENCED: a shutdown request is granted at once (a fenced broker leads nothing); else,
          unless it wants to stay fenced, it is unfenced once it has caught up with its own
          RegisterBrokerRecord (``current_metadata_offset >= register_broker_record_offset``),
          so it never serves from metadata older than its registration.
        * UNFENCED: wanting fence is granted (with shutdown: SHUTDOWN_NOW); a shutdown request
          becomes a controlled shutdown while the broker still leads partitions, else is
          granted at once.
        * CONTROLLED_SHUTDOWN: completes (SHUTDOWN_NOW) once it leads nothing and every active
          broker has reached its controlled shutdown offset, i.e. seen the leadership moves.

        ``has_leaderships`` is called only when the answer depends on it.  RuntimeError if the
        broker is not registered."""
        broker = self._brokers.get(broker_id)
        if broker is None:
            raise RuntimeError(f"Broker {broker_id} is not registered.")
        if broker.controlled_shutdown_offset >= 0:  # CONTROLLED_SHUTDOWN (current_broker_state, inline)
            if has_leaderships():
                log.debug("Broker %d is in controlled shutdown but still leads partitions.", broker_id)
                return _SHUTDOWN_WAITS
            lowest = self.lowest_active_offset()
            if broker.controlled_shutdown_offset <= lowest:
                log.info("Broker %d may shut down: the lowest active offset %d has reached its controlled "
                         "shutdown offset %d.", broker_id, lowest, broker.controlled_shutdown_offset)
                return _SHUTDOWN_COMPLETES
            log.debug("Broker %d must wait to shut down: the lowest active offset %d is below its controlled "
                      "shutdown offset %d.", broker_id, lowest, broker.controlled_shutdown_offset)
            return _SHUTDOWN_WAITS
        if broker.fenced:
            if request.want_shut_down:
                log.info("Fenced broker %d has asked to shut down; granted at once.", broker_id)
                return _FENCED_SHUTS_DOWN
            if not request.want_fence:
                if request.current_metadata_offset >= register_broker_record_offset:
                    log.info("Unfencing broker %d: it has caught up with its registration record at "
                             "offset %d.", broker_id, register_broker_record_offset)
                    return _FENCED_UNFENCES
                log.debug("Broker %d stays fenced: it is at metadata offset %d, behind its registration "
                          "record at %d.", broker_id, request.current_metadata_offset,
                          register_broker_record_offset)
            return _FENCED_STAYS
        # UNFENCED
        if request.want_fence:
            if request.want_shut_down:
                log.info("Unfenced broker %d has asked to shut down; granted at once.", broker_id)
                return _UNFENCED_SHUTS_DOWN
            log.info("Unfenced broker %d has asked to be fenced; granted.", broker_id)
            return _UNFENCED_FENCES
        if request.want_shut_down:
            if has_leaderships():
                log.info("Unfenced broker %d has asked to shut down; it leads partitions, so it "
                         "enters controlled shutdown.", broker_id)
                return _UNFENCED_ENTERS_SHUTDOWN
            log.info("Unfenced broker %d has asked to shut down; it leads nothing, granted at once.",
                     broker_id)
            return _UNFENCED_SHUTS_DOWN
        return _UNFENCED_STAYS
