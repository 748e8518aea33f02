"""BrokerHeartbeatTracker and BrokerHeartbeatManager (Kafka's BrokerHeartbeatTrackerTest and
BrokerHeartbeatManagerTest, re-stated in milliseconds on a manual clock)."""
from __future__ import annotations

import pytest

from kraft_node.metadata.controller.heartbeats import (
    NO_ACTIVE_OFFSET,
    BrokerControlState,
    BrokerControlStates,
    BrokerHeartbeatManager,
    BrokerHeartbeatTracker,
    BrokerIdAndEpoch,
    UsableBroker,
)
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest

FENCED = BrokerControlState.FENCED
UNFENCED = BrokerControlState.UNFENCED
CONTROLLED_SHUTDOWN = BrokerControlState.CONTROLLED_SHUTDOWN
SHUTDOWN_NOW = BrokerControlState.SHUTDOWN_NOW


class ManualClock:
    def __init__(self, now: int = 0):
        self.now = now

    def __call__(self) -> int:
        return self.now

    def sleep(self, ms: int) -> None:
        self.now += ms


TEST_BROKERS = {BrokerIdAndEpoch(0, 0), BrokerIdAndEpoch(1, 100), BrokerIdAndEpoch(2, 200)}


def new_tracker() -> tuple[BrokerHeartbeatTracker, ManualClock]:
    clock = ManualClock()
    return BrokerHeartbeatTracker(clock, session_timeout_ms=10), clock


def new_manager() -> tuple[BrokerHeartbeatManager, ManualClock]:
    clock = ManualClock()
    return BrokerHeartbeatManager(clock, session_timeout_ms=10), clock


def heartbeat(*, want_fence: bool = False, want_shut_down: bool = False, offset: int = 0) -> BrokerHeartbeatRequest:
    return BrokerHeartbeatRequest(want_fence=want_fence, want_shut_down=want_shut_down,
                                  current_metadata_offset=offset)


# -- the tracker ---------------------------------------------------------------------------------

def test_update_contact_time():
    tracker, _ = new_tracker()
    assert tracker.contact_time(1, 100) is None
    tracker.update_contact_time(1, 100)
    assert tracker.contact_time(1, 100) == 0
    tracker.update_contact_time(1, 100, now_ms=7)
    assert tracker.contact_time(1, 100) == 7


def test_maybe_remove_expired_with_empty_tracker():
    tracker, _ = new_tracker()
    assert tracker.maybe_remove_expired() is None


def test_maybe_remove_expired_with_all_up_to_date():
    tracker, _ = new_tracker()
    for b in TEST_BROKERS:
        tracker.update_contact_time(b.id, b.epoch)
    assert tracker.maybe_remove_expired() is None
    assert set(tracker.sessions()) == TEST_BROKERS


def test_maybe_remove_expired_with_all_expired_removes_one_per_call():
    tracker, clock = new_tracker()
    for b in TEST_BROKERS:
        tracker.update_contact_time(b.id, b.epoch)
    clock.sleep(11)
    expired = []
    while (found := tracker.maybe_remove_expired()) is not None:
        expired.append(found)
        assert len(tracker.sessions()) == len(TEST_BROKERS) - len(expired)
    assert set(expired) == TEST_BROKERS and len(expired) == 3


def test_maybe_remove_expired_takes_only_expired_sessions():
    tracker, clock = new_tracker()
    tracker.update_contact_time(0, 0)
    clock.sleep(5)
    tracker.update_contact_time(1, 100)
    clock.sleep(6)  # broker 0 heard from 11 ms ago, broker 1 5 ms ago
    assert tracker.maybe_remove_expired() == BrokerIdAndEpoch(0, 0)
    assert tracker.maybe_remove_expired() is None
    assert tracker.has_valid_session(1, 100)
    assert tracker.maybe_remove_expired(now_ms=clock.now + 10) == BrokerIdAndEpoch(1, 100)


def test_has_valid_session_is_true_for_known_broker():
    tracker, _ = new_tracker()
    for b in TEST_BROKERS:
        tracker.update_contact_time(b.id, b.epoch)
    assert tracker.has_valid_session(2, 200)


def test_has_valid_session_is_false_for_unknown_broker():
    tracker, _ = new_tracker()
    for b in TEST_BROKERS:
        tracker.update_contact_time(b.id, b.epoch)
    assert not tracker.has_valid_session(3, 300)


def test_has_valid_session_is_false_for_unknown_broker_epoch():
    tracker, _ = new_tracker()
    for b in TEST_BROKERS:
        tracker.update_contact_time(b.id, b.epoch)
    assert not tracker.has_valid_session(2, 100)


def test_has_valid_session_ends_at_expiry_and_on_removal():
    tracker, clock = new_tracker()
    tracker.update_contact_time(1, 100)
    clock.sleep(10)
    assert tracker.has_valid_session(1, 100)  # exactly one timeout later: still valid
    clock.sleep(1)
    assert not tracker.has_valid_session(1, 100)
    tracker.update_contact_time(1, 100)
    tracker.remove_session(1, 100)
    assert not tracker.has_valid_session(1, 100)
    tracker.remove_session(1, 100)  # removing an unknown session is harmless


def test_is_expired_is_false_for_the_current_time():
    tracker, _ = new_tracker()
    assert not tracker.is_expired(456, 456)


def test_is_expired_is_false_ten_milliseconds_after():
    tracker, _ = new_tracker()
    assert not tracker.is_expired(456, 466)


def test_is_expired_is_true_after_expiration_time():
    tracker, _ = new_tracker()
    assert tracker.is_expired(456, 456 + 11)


def test_is_expired_is_false_for_previous_time():
    tracker, _ = new_tracker()
    assert not tracker.is_expired(456, 0)


def test_default_session_timeout_is_kafkas():
    assert BrokerHeartbeatTracker(ManualClock()).session_timeout_ms == 9000


# -- the manager ---------------------------------------------------------------------------------

def test_has_valid_session_follows_the_tracker():
    manager, clock = new_manager()
    assert not manager.has_valid_session(0, 0)
    for broker_id in range(3):
        manager.register(broker_id, True)
    manager.tracker.update_contact_time(0, 0)
    clock.sleep(5)
    manager.tracker.update_contact_time(1, 100)
    manager.tracker.update_contact_time(2, 200)
    assert manager.has_valid_session(0, 0)
    assert manager.has_valid_session(1, 100)
    assert manager.has_valid_session(2, 200)
    assert not manager.has_valid_session(3, 300)
    clock.sleep(6)
    assert not manager.has_valid_session(0, 0)
    assert manager.has_valid_session(1, 100)
    assert manager.has_valid_session(2, 200)
    manager.remove_session(2, 200)
    assert not manager.has_valid_session(2, 200)
    manager.remove_session(1, 100)
    assert not manager.has_valid_session(1, 100)


def test_active_set_is_ordered_by_metadata_offset_then_id():
    manager, _ = new_manager()
    for broker_id in (1, 2, 3):
        manager.register(broker_id, False)
    assert manager.active_brokers() == [(-1, 1), (-1, 2), (-1, 3)]
    manager.touch(1, False, 800)
    manager.touch(2, False, 400)
    manager.touch(3, False, 100)
    assert manager.active_brokers() == [(100, 3), (400, 2), (800, 1)]
    assert manager.lowest_active_offset() == 100
    manager.touch(3, True, 100)
    assert manager.active_brokers() == [(400, 2), (800, 1)]
    manager.fence(2)
    manager.remove(1)
    assert manager.active_brokers() == []
    assert manager.lowest_active_offset() == NO_ACTIVE_OFFSET


def usable_set(manager: BrokerHeartbeatManager) -> set[UsableBroker]:
    return set(manager.usable_brokers(lambda i: "rack1" if i % 2 == 0 else "rack2"))


def test_usable_broker_iterator():
    manager, _ = new_manager()
    assert usable_set(manager) == set()
    for broker_id in range(5):
        manager.register(broker_id, True)
    manager.touch(0, False, 100)
    manager.touch(1, False, 100)
    manager.touch(2, False, 98)
    manager.touch(3, False, 100)
    manager.touch(4, True, 100)
    assert manager.lowest_active_offset() == 98
    expected = {UsableBroker(0, "rack1", False), UsableBroker(1, "rack2", False), UsableBroker(2, "rack1", False),
                UsableBroker(3, "rack2", False), UsableBroker(4, "rack1", True)}
    assert usable_set(manager) == expected
    manager.update_controlled_shutdown_offset(2, 0)
    assert manager.lowest_active_offset() == 100
    with pytest.raises(RuntimeError, match="^Fenced brokers cannot enter controlled shutdown.$"):
        manager.update_controlled_shutdown_offset(4, 0)
    manager.touch(4, False, 100)
    manager.update_controlled_shutdown_offset(4, 0)
    expected -= {UsableBroker(2, "rack1", False), UsableBroker(4, "rack1", True)}
    assert usable_set(manager) == expected


def test_controlled_shutdown_offset_is_only_updated_once():
    manager, _ = new_manager()
    for broker_id in range(5):
        manager.register(broker_id, True)
    manager.touch(0, False, 100)
    manager.touch(1, False, 100)
    manager.touch(2, False, 98)
    manager.touch(3, False, 100)
    manager.touch(4, True, 100)
    assert manager.controlled_shutdown_offset(2) is None
    manager.update_controlled_shutdown_offset(2, 98)
    assert manager.controlled_shutdown_offset(2) == 98
    manager.update_controlled_shutdown_offset(2, 99)
    assert manager.controlled_shutdown_offset(2) == 98
    assert manager.controlled_shutdown_offset(3) is None
    manager.update_controlled_shutdown_offset(3, 101)
    assert manager.controlled_shutdown_offset(3) == 101
    manager.update_controlled_shutdown_offset(3, 102)
    assert manager.controlled_shutdown_offset(3) == 101


def test_fencing_a_broker_ends_its_controlled_shutdown():
    manager, _ = new_manager()
    manager.register(1, False)
    manager.update_controlled_shutdown_offset(1, 50)
    assert manager.current_broker_state(1) is CONTROLLED_SHUTDOWN
    manager.touch(1, False, 60)  # a heartbeat while shutting down keeps it out of the active set
    assert manager.current_broker_state(1) is CONTROLLED_SHUTDOWN
    assert manager.active_brokers() == []
    manager.touch(1, True, 60)
    assert manager.controlled_shutdown_offset(1) is None
    assert manager.current_broker_state(1) is FENCED


def test_calculate_next_broker_state():
    manager, _ = new_manager()
    for broker_id in range(6):
        manager.register(broker_id, True)
    manager.touch(0, True, 100)
    manager.touch(1, False, 98)
    manager.touch(2, False, 100)
    manager.touch(3, False, 100)
    manager.touch(4, True, 100)
    manager.touch(5, False, 99)
    manager.update_controlled_shutdown_offset(5, 99)
    assert manager.lowest_active_offset() == 98

    def states(cur, nxt):
        return BrokerControlStates(cur, nxt)

    calc = manager.calculate_next_broker_state
    CS = CONTROLLED_SHUTDOWN
    assert calc(0, heartbeat(want_shut_down=True), 100, lambda: False) == states(FENCED, SHUTDOWN_NOW)
    assert calc(0, heartbeat(offset=100), 100, lambda: False) == states(FENCED, UNFENCED)
    assert calc(0, heartbeat(offset=50), 100, lambda: False) == states(FENCED, FENCED)
    assert calc(0, heartbeat(want_fence=True), 100, lambda: False) == states(FENCED, FENCED)

    assert calc(1, heartbeat(want_shut_down=True), 100, lambda: True) == states(UNFENCED, CONTROLLED_SHUTDOWN)
    assert calc(1, heartbeat(want_shut_down=True), 100, lambda: False) == states(UNFENCED, SHUTDOWN_NOW)
    assert calc(1, heartbeat(), 100, lambda: False) == states(UNFENCED, UNFENCED)
    assert calc(1, heartbeat(want_fence=True), 100, lambda: False) == states(UNFENCED, FENCED)
    assert calc(1, heartbeat(want_fence=True, want_shut_down=True), 100, lambda: True) == \
        states(UNFENCED, SHUTDOWN_NOW)

    # broker 5 waits for broker 1 (at 98) to pass its controlled shutdown offset 99
    assert calc(5, heartbeat(want_shut_down=True), 100, lambda: True) == states(CS, CS)
    assert calc(5, heartbeat(want_shut_down=True), 100, lambda: False) == states(CS, CS)
    manager.fence(1)
    assert calc(5, heartbeat(want_shut_down=True), 100, lambda: False) == states(CS, SHUTDOWN_NOW)
    assert calc(5, heartbeat(want_shut_down=True), 100, lambda: True) == states(CS, CS)
    for unknown in (6, 7):
        with pytest.raises(RuntimeError, match=f"^Broker {unknown} is not registered.$"):
            calc(unknown, heartbeat(want_shut_down=True), 100, lambda: True)


def test_has_leaderships_is_asked_only_when_it_matters():
    manager, _ = new_manager()
    manager.register(0, True)
    manager.register(1, False)

    def never() -> bool:
        raise AssertionError("has_leaderships should not be called")

    manager.calculate_next_broker_state(0, heartbeat(want_shut_down=True), 0, never)
    manager.calculate_next_broker_state(0, heartbeat(offset=5), 0, never)
    manager.calculate_next_broker_state(1, heartbeat(), 0, never)
    manager.calculate_next_broker_state(1, heartbeat(want_fence=True), 0, never)


def test_control_state_flags_match_kafkas():
    assert [(s.fenced, s.should_shut_down, s.in_controlled_shutdown) for s in BrokerControlState] == [
        (True, False, False), (False, False, False), (False, False, True), (True, True, False)]


def test_touch_and_update_raise_unless_registered():
    manager, _ = new_manager()
    with pytest.raises(RuntimeError, match="^Broker 1 is not registered.$"):
        manager.touch(1, False, 0)
    with pytest.raises(RuntimeError, match="^Broker 1 is not registered.$"):
        manager.update_controlled_shutdown_offset(1, 0)
    manager.register(1, True)
    manager.touch(1, False, 0)
    assert manager.current_broker_state(1) is UNFENCED


def test_register_keeps_the_reported_offset_and_fence_and_remove_forget_unknown_brokers():
    manager, _ = new_manager()
    manager.register(1, True)
    assert manager.metadata_offset(1) == -1
    manager.touch(1, False, 42)
    manager.register(1, False)  # a replayed change that does not alter fencing
    assert manager.metadata_offset(1) == 42 and manager.active_brokers() == [(42, 1)]
    manager.register(1, True)
    assert manager.metadata_offset(1) == 42 and manager.active_brokers() == []
    manager.fence(9)
    manager.remove(9)
    assert manager.is_fenced(9) and not manager.is_registered(9)
    manager.remove(1)
    assert not manager.is_registered(1)
