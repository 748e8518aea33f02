"""Regression (found by ``test_partitions_chaos.py``): an AlterPartition answer that fails after
the partition's state moved on (a controlled shutdown or new metadata overtook the change) was
ignored without retrieving the future's exception, so asyncio logged "Future exception was never
retrieved" at ERROR on the broker (seen as ``AlterPartitionError(... FENCED_LEADER_EPOCH)`` during
SIGTERM).  The answer must be consumed whether or not it still applies."""
from __future__ import annotations

import asyncio
import gc
from typing import Any

from test_alter_partition_manager import FakeChannel, FakeLeaderPartition, ok_for_all

from kraft_node.broker.alter_partition_manager import AlterPartitionManager, partition_alter_callback
from kraft_node.protocol.errors import Errors
from kraft_storage.messages.runtime import Uuid


def test_an_overtaken_failed_answer_is_consumed_not_left_unretrieved():
    unretrieved: list[dict[str, Any]] = []

    async def go() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))
        ch = FakeChannel()
        mgr = AlterPartitionManager(ch, broker_id=1, broker_epoch=lambda: 77)
        part = FakeLeaderPartition(Uuid.random())
        alter = partition_alter_callback(mgr, broker_epoch=lambda: 77)
        part.propose(alter, [1])
        part.partition_epoch = 12            # new metadata arrived while the request was in flight
        await ch.answer(lambda req: ok_for_all(req, errors={0: int(Errors.FENCED_LEADER_EPOCH)}))
        await asyncio.sleep(0)
        assert part.pending_isr == (1,) and part.cleared == 0   # ignored: the state moved on
        await mgr.close()
        gc.collect()                         # a future dropped with its exception unread reports here
        await asyncio.sleep(0)

    asyncio.run(asyncio.wait_for(go(), 10))
    assert not [c for c in unretrieved if "never retrieved" in str(c.get("message"))], unretrieved
