"""LogManager: where new logs go across several ``log.dirs``, and the per-dir counts behind it.

Why these tests: the placement counted every known partition for each new log (O(partitions)
a log: creating 10k logs in one delta was quadratic); it now keeps a count per log dir.  The
counts must follow every path that adds or forgets a log (start, create, a failed create,
delete, stray, a log that fails to load), else placement drifts silently.
"""
from __future__ import annotations

import asyncio
import collections
import os
import uuid

import pytest

from kraft_node.broker.log_manager import LogManager
from kraft_node.metadata.image.topics import TopicPartition


def _tid() -> bytes:
    return uuid.uuid4().bytes


def _check_counts(lm: LogManager) -> None:
    """The invariant: the per-dir counts are the number of partitions placed in each dir."""
    real = collections.Counter(lm._dir_of.values())
    assert {d: lm._dir_counts.get(d, 0) for d in lm.log_dirs} == {d: real.get(d, 0) for d in lm.log_dirs}
    assert set(lm._dir_counts) == set(lm.log_dirs)


def _dirs(tmp_path, n: int) -> list[str]:
    return [str(tmp_path / f"logs{i}") for i in range(n)]


def test_new_logs_go_to_the_dir_with_fewest_partitions_in_listed_order_on_ties(tmp_path):
    dirs = _dirs(tmp_path, 3)
    lm = LogManager(dirs)
    lm.startup()
    placed = []
    for p in range(7):
        kl = lm.get_or_create_log(TopicPartition("t", p), _tid(), {})
        placed.append(os.path.dirname(kl.directory))
        _check_counts(lm)
    # round robin in the listed order: every tie goes to the first dir listed
    assert placed == [dirs[0], dirs[1], dirs[2], dirs[0], dirs[1], dirs[2], dirs[0]]
    asyncio.run(lm.shutdown())


def test_counts_follow_deletes_and_strays_so_the_emptied_dir_is_chosen_next(tmp_path):
    dirs = _dirs(tmp_path, 2)
    lm = LogManager(dirs)
    lm.startup()
    tps = [TopicPartition("t", p) for p in range(4)]  # t-0, t-2 in dirs[0]; t-1, t-3 in dirs[1]
    for tp in tps:
        lm.get_or_create_log(tp, _tid(), {})
    lm.async_delete(tps[0])
    _check_counts(lm)
    lm.mark_stray(tps[2])
    _check_counts(lm)
    assert lm._dir_counts == {dirs[0]: 0, dirs[1]: 2}
    # both new logs go to the emptied dir until it catches up, then the tie goes to the first
    new = [os.path.dirname(lm.get_or_create_log(TopicPartition("u", p), _tid(), {}).directory) for p in range(3)]
    assert new == [dirs[0], dirs[0], dirs[0]]
    _check_counts(lm)
    asyncio.run(lm.shutdown())


def test_a_failed_create_gives_its_slot_back(tmp_path):
    dirs = _dirs(tmp_path, 2)
    lm = LogManager(dirs)
    lm.startup()
    plan = lm.prepare_log(TopicPartition("t", 0), _tid(), {})
    assert plan.log_dir == dirs[0] and lm._dir_counts[dirs[0]] == 1
    lm.register(plan, None)  # opening failed (a full disk): the plan is forgotten
    _check_counts(lm)
    assert lm._dir_counts == {dirs[0]: 0, dirs[1]: 0}
    assert lm.prepare_log(TopicPartition("t", 1), _tid(), {}).log_dir == dirs[0]


def test_counts_after_a_restart_include_the_logs_found_and_not_the_ones_that_failed_to_load(tmp_path):
    dirs = _dirs(tmp_path, 2)
    lm = LogManager(dirs)
    lm.startup()
    for p in range(5):  # 3 in dirs[0], 2 in dirs[1]
        lm.get_or_create_log(TopicPartition("t", p), _tid(), {})
    asyncio.run(lm.shutdown())
    # t-4 (in dirs[0]) becomes unloadable: a directory inside a partition log is refused
    os.makedirs(os.path.join(dirs[0], "t-4", "junk"))
    again = LogManager(dirs)
    again.startup()
    assert TopicPartition("t", 4) in again.failed
    _check_counts(again)
    assert again._dir_counts == {dirs[0]: 2, dirs[1]: 2}
    assert again.prepare_log(TopicPartition("u", 0), _tid(), {}).log_dir == dirs[0]
    asyncio.run(again.shutdown())


def test_many_logs_in_one_batch_stay_balanced(tmp_path):
    """Plans for a whole delta are made before any log is opened (the ReplicaManager opens
    them in threads): every plan counts at once, so 300 plans spread 100/100/100."""
    dirs = _dirs(tmp_path, 3)
    lm = LogManager(dirs)
    lm.startup()
    plans = [lm.prepare_log(TopicPartition("big", p), _tid(), {}) for p in range(300)]
    assert collections.Counter(p.log_dir for p in plans) == {d: 100 for d in dirs}
    _check_counts(lm)


def test_shutdown_says_how_long_closing_and_checkpointing_took(tmp_path, caplog):
    lm = LogManager([str(tmp_path / "logs")])
    lm.startup()
    for p in range(3):
        lm.get_or_create_log(TopicPartition("t", p), _tid(), {})
    with caplog.at_level("INFO", logger="kraft.broker.logs"):
        asyncio.run(lm.shutdown())
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("closed ")]
    assert len(lines) == 1
    assert lines[0].startswith("closed 3 partition logs in ") and "checkpoints written in" in lines[0]


@pytest.mark.parametrize("dirs_n", [1, 4])
def test_next_log_dir_does_not_scan_the_partitions(tmp_path, dirs_n, monkeypatch):
    """The choice reads the per-dir counts only: with the partition map made unreadable, a
    placement still works (it used to iterate the map for every new log)."""
    lm = LogManager(_dirs(tmp_path, dirs_n))
    lm.startup()
    for p in range(10):
        lm.prepare_log(TopicPartition("t", p), _tid(), {})

    class NoScan(dict):  # type: ignore[type-arg]
        def values(self):  # noqa: D401 - the test's trap
            raise AssertionError("placement scanned every partition")
    lm._dir_of = NoScan(lm._dir_of)
    assert lm._next_log_dir() in lm.log_dirs


def test_partitions_of_a_topic_share_one_config_until_its_overrides_change(tmp_path, caplog):
    lm = LogManager([str(tmp_path / "logs")], broker_props={"log.segment.bytes": "2000000"})
    lm.startup()
    with caplog.at_level("WARNING", logger="kraft.broker.logs"):
        a = lm.prepare_log(TopicPartition("t", 0), _tid(), {"cleanup.policy": "compact"}).config
        b = lm.prepare_log(TopicPartition("t", 1), _tid(), {"cleanup.policy": "compact"}).config
    assert a is b and a.segment_bytes == 2_000_000
    # the unsupported value is still named once for the topic
    assert sum("cleanup.policy=compact" in r.getMessage() for r in caplog.records) == 1
    c = lm.prepare_log(TopicPartition("t", 2), _tid(), {"cleanup.policy": "compact", "segment.bytes": "1048576"}).config
    assert c.segment_bytes == 1_048_576 and c is not a
    # another topic with no overrides gets the broker defaults, not t's
    assert lm.prepare_log(TopicPartition("u", 0), _tid(), {}).config.segment_bytes == 2_000_000
    # an existing log follows a config change (update_config) and back
    kl = lm.get_or_create_log(TopicPartition("v", 0), _tid(), {})
    lm.update_config(TopicPartition("v", 0), {"retention.ms": "1000"})
    assert kl.config.retention_ms == 1000
    lm.update_config(TopicPartition("v", 0), {})
    assert kl.config.retention_ms == lm.defaults["retention.ms"]
    asyncio.run(lm.shutdown())
