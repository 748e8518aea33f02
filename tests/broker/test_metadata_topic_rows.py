"""``topic_rows``: a topic's partitions -- block rows with overrides replacing some and adding
others, directories real, LOST or MIGRATING -- as the encoder's columns, equal to a block made
from the same registrations one by one (``PartitionBlock.from_registrations``); and the bytes the
kernel makes of them equal the block's."""
from __future__ import annotations

import random

import numpy as np
import pytest

from kraft_node.broker.metadata_encoding import BrokerTable, encode_block_partitions, topic_rows
from kraft_node.broker.metadata_sample import sample_image
from kraft_node.metadata.controller.cluster_control import DirectoryId
from kraft_node.metadata.controller.replication_control import LeaderRecoveryState, PartitionRegistration
from kraft_node.metadata.image.partition_block import PartitionBlock
from kraft_storage.messages.runtime import Uuid

_COLUMNS = ("partition_id", "leader", "leader_epoch", "replicas", "replicas_offsets", "isr", "isr_offsets",
            "directories", "directories_offsets")


def _registration(rng: random.Random) -> PartitionRegistration:
    replicas = tuple(rng.sample(range(6), rng.randint(0, 4)))
    kind = rng.random()
    if kind < 0.4:
        directories = (DirectoryId.MIGRATING,) * len(replicas)
    else:
        directories = tuple(rng.choice([DirectoryId.LOST, DirectoryId.MIGRATING, Uuid(rng.getrandbits(120) + 99)])
                            for _ in replicas)
    return PartitionRegistration(replicas=replicas, directories=directories,
                                 isr=tuple(r for r in replicas if rng.random() < 0.7), removing_replicas=(),
                                 adding_replicas=(), leader=rng.choice([*replicas, -1]) if replicas else -1,
                                 leader_recovery_state=LeaderRecoveryState.RECOVERED,
                                 leader_epoch=rng.randint(0, 50), partition_epoch=rng.randint(0, 50))


@pytest.mark.parametrize("seed", range(10))
def test_topic_rows_equal_a_block_of_the_same_registrations(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(0, 12)
    pids = sorted(rng.sample(range(40), n))
    before = [rng.randint(0, 5) for _ in range(3)]  # rows of other topics around the topic's
    all_pids = list(range(before[0])) + pids + list(range(before[1]))
    regs = [_registration(rng) for _ in all_pids]
    block = PartitionBlock.from_registrations(all_pids, regs)
    start, stop = before[0], before[0] + n
    overrides = {p: _registration(rng) for p in rng.sample(range(50), rng.randint(0, 6))}
    if rng.random() < 0.2:
        block, start, stop = None, 0, 0
    got = topic_rows(block, start, stop, overrides)
    merged = {} if block is None else dict(zip(pids, regs[start:stop]))
    merged.update(overrides)
    want = PartitionBlock.from_registrations(sorted(merged), [merged[p] for p in sorted(merged)])
    assert len(got) == len(merged)
    for name in _COLUMNS:
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    image = sample_image(brokers=3, topics=1, partitions=1, fenced=[1])
    table = BrokerTable.of(image.cluster, "PLAINTEXT")
    for version in (0, 5, 12):
        a, ao = encode_block_partitions(got, table, version)
        b, bo = encode_block_partitions(want, table, version)
        assert a == b and np.array_equal(ao, bo)


@pytest.mark.parametrize("seed", range(8))
def test_topics_rows_equal_topic_rows_topic_by_topic(seed: int) -> None:
    """Many topics at once (two shared blocks, topics without a block, empty topics, overrides
    replacing rows and adding partitions): topic ``k``'s rows equal its own ``topic_rows``."""
    from kraft_node.broker.metadata_encoding import topics_rows
    rng = random.Random(seed)
    blocks = []
    for _ in range(2):
        pids = [p for t in range(6) for p in sorted(rng.sample(range(20), 4))]
        blocks.append((PartitionBlock.from_registrations(pids, [_registration(rng) for _ in pids]), pids))
    topics = []
    for _ in range(rng.randint(1, 14)):
        block, _pids = rng.choice(blocks)
        t = rng.randrange(6)
        start, stop = (t * 4, t * 4 + 4) if rng.random() < 0.8 else (0, 0)
        if rng.random() < 0.2:
            block, start, stop = None, 0, 0
        overrides = {p: _registration(rng) for p in rng.sample(range(25), rng.randint(0, 5))}
        topics.append((block, start, stop, overrides))
    rows, bounds = topics_rows(topics)
    assert bounds[0] == 0 and bounds[-1] == len(rows)
    for k, (block, start, stop, overrides) in enumerate(topics):
        want = topic_rows(block, start, stop, overrides)
        a, b = int(bounds[k]), int(bounds[k + 1])
        assert b - a == len(want)
        for name in ("partition_id", "leader", "leader_epoch"):
            assert np.array_equal(getattr(rows, name)[a:b], getattr(want, name)), name
        for values, offsets in (("replicas", "replicas_offsets"), ("isr", "isr_offsets"),
                                ("directories", "directories_offsets")):
            got_o = getattr(rows, offsets)[a:b + 1]
            got = getattr(rows, values)[got_o[0]:got_o[-1]]
            assert np.array_equal(got, getattr(want, values)), values
            assert np.array_equal(got_o - got_o[0], getattr(want, offsets)), offsets
