"""LogManager: one clean-shutdown marker per log dir, as Kafka's ``CleanShutdownFileHandler``.

What must hold: a dir is marked only when every log of it closed cleanly (a log closed behind
the manager's back, as the ReplicaManager does when a producer snapshot fails, leaves it
unmarked, so its logs recover); the marker is trusted at the next start for every log of its
dir and deleted once they are loaded; its broker epoch becomes ``previous_broker_epoch`` only
when every dir had one (KIP-966's clean-restart proof); a partition log's own marker (written by
kraft before session 18) is removed, never trusted.
"""
from __future__ import annotations

import asyncio
import json
import os
import uuid

from kraft_node.broker.log_manager import LogManager
from kraft_node.metadata.image.topics import TopicPartition
from kraft_storage.log.log import CLEAN_SHUTDOWN_FILE
from kraft_storage.record import build_batch

TPS = [TopicPartition("t", p) for p in range(4)]


def _dirs(tmp_path, n: int) -> list[str]:
    return [str(tmp_path / f"logs{i}") for i in range(n)]


def _fill(lm: LogManager) -> None:
    for tp in TPS:
        kl = lm.get_or_create_log(tp, uuid.uuid4().bytes, {})
        kl.append_as_leader(build_batch([(None, b"v%d" % tp.partition)]), leader_epoch=1)


def _filled_and_closed(dirs: list[str], broker_epoch: int = -1) -> dict[TopicPartition, str]:
    """A LogManager over ``dirs`` started, given TPS' logs and shut down; each log's directory."""
    lm = LogManager(dirs)
    lm.startup()
    _fill(lm)
    paths = {tp: kl.directory for tp, kl in lm.logs.items()}
    asyncio.run(lm.shutdown(broker_epoch=broker_epoch))
    return paths


def _markers(tmp_path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(root, CLEAN_SHUTDOWN_FILE), tmp_path)
                  for root, _dirs, files in os.walk(tmp_path) if CLEAN_SHUTDOWN_FILE in files)


def test_a_clean_shutdown_marks_each_log_dir_once_and_the_next_start_trusts_it(tmp_path):
    dirs = _dirs(tmp_path, 2)
    lm = LogManager(dirs)
    lm.startup()
    assert lm.previous_broker_epoch == -1  # a first start: no marker anywhere
    _fill(lm)
    asyncio.run(lm.shutdown(broker_epoch=42))
    # one marker per log dir, none in the partition directories
    assert _markers(tmp_path) == ["logs0/" + CLEAN_SHUTDOWN_FILE, "logs1/" + CLEAN_SHUTDOWN_FILE]
    with open(os.path.join(dirs[0], CLEAN_SHUTDOWN_FILE), "rb") as f:
        assert json.loads(f.read()) == {"version": 0, "brokerEpoch": 42}

    again = LogManager(dirs)
    again.startup()
    assert again.previous_broker_epoch == 42
    assert all(kl.load_report.clean_shutdown for kl in again.logs.values()) and len(again.logs) == 4
    assert _markers(tmp_path) == []  # deleted once the logs were loaded: a crash from now on recovers
    assert again.logs[TPS[1]].log_end_offset == 1
    asyncio.run(again.shutdown(broker_epoch=43))


def test_a_log_closed_behind_the_managers_back_leaves_its_dir_unmarked(tmp_path):
    dirs = _dirs(tmp_path, 2)
    lm = LogManager(dirs)
    lm.startup()
    _fill(lm)
    # the ReplicaManager's path when a producer snapshot fails: flushed, closed without a marker
    kl = lm.logs.pop(TPS[1])
    unclean_dir = os.path.dirname(kl.directory)
    kl.flush()
    kl.close_uncleanly()
    asyncio.run(lm.shutdown(broker_epoch=7))
    clean_dir = next(d for d in dirs if d != unclean_dir)
    assert _markers(tmp_path) == [os.path.relpath(os.path.join(clean_dir, CLEAN_SHUTDOWN_FILE), tmp_path)]

    again = LogManager(dirs)
    again.startup()
    assert again.previous_broker_epoch == -1  # not every dir proves a clean shutdown
    for tp, log in again.logs.items():
        assert log.load_report.clean_shutdown == (os.path.dirname(log.directory) == clean_dir), tp
    assert again.logs[TPS[1]].log_end_offset == 1  # recovered, nothing lost
    asyncio.run(again.shutdown())


def test_a_failed_close_leaves_its_dir_unmarked(tmp_path, monkeypatch):
    dirs = _dirs(tmp_path, 1)
    lm = LogManager(dirs)
    lm.startup()
    _fill(lm)
    victim = lm.logs[TPS[2]]
    real = victim.close

    def failing_close(**kw):
        real(**kw)
        raise OSError(5, "I/O error")
    monkeypatch.setattr(victim, "close", failing_close)
    asyncio.run(lm.shutdown(broker_epoch=3))
    assert _markers(tmp_path) == []
    again = LogManager(dirs)
    again.startup()
    assert not any(kl.load_report.clean_shutdown for kl in again.logs.values())
    asyncio.run(again.shutdown())


def test_an_old_per_log_marker_is_removed_and_not_trusted(tmp_path):
    dirs = _dirs(tmp_path, 1)
    path = _filled_and_closed(dirs)[TPS[0]]
    os.unlink(os.path.join(dirs[0], CLEAN_SHUTDOWN_FILE))  # as if the dir were not marked
    with open(os.path.join(path, CLEAN_SHUTDOWN_FILE), "w") as f:
        f.write('{"version":0,"brokerEpoch":5}')
    again = LogManager(dirs)
    again.startup()
    assert not again.logs[TPS[0]].load_report.clean_shutdown
    assert not os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_FILE))
    asyncio.run(again.shutdown())


def test_an_unreadable_marker_is_a_clean_shutdown_of_an_unknown_epoch(tmp_path):
    dirs = _dirs(tmp_path, 1)
    _filled_and_closed(dirs, broker_epoch=9)
    with open(os.path.join(dirs[0], CLEAN_SHUTDOWN_FILE), "w") as f:
        f.write("not json")
    again = LogManager(dirs)
    again.startup()
    assert again.previous_broker_epoch == -1
    assert all(kl.load_report.clean_shutdown for kl in again.logs.values())
    asyncio.run(again.shutdown())
