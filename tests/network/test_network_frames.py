"""FrameReader (stream -> size-prefixed frames) and the server's answer ordering."""
import asyncio
import os
import struct
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft_node.network import KafkaConnection, KafkaServer
from kraft_node.network.frames import FrameError, FrameReader
from kraft_node.network.server import DEFERRED
from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.generated.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from kraft_node.protocol.generated.describe_quorum import DescribeQuorumRequest, DescribeQuorumResponse


def _frame(p: bytes) -> bytes:
    return struct.pack(">i", len(p)) + p


@given(st.lists(st.binary(max_size=300), max_size=20), st.lists(st.integers(1, 400), max_size=40),
       st.sampled_from([0, 1, 7, 64, 1 << 20]))
def test_any_chunking_gives_back_the_same_frames(payloads, cuts, large):
    """Whatever the chunking, and whichever frames take the large-frame path (a list of
    chunks joined once) or the small one (a bytearray tail): the same payloads, as bytes,
    and nothing held back at the end."""
    stream = b"".join(_frame(p) for p in payloads)
    r = FrameReader(max_size=1000, large=large)
    out, pos, held = [], 0, []
    for c in cuts:
        out += r.feed(stream[pos:pos + c])
        pos += c
        held.append(r.buffered)
    out += r.feed(stream[pos:])
    assert out == payloads
    assert all(type(p) is bytes for p in out)
    assert r.buffered == 0
    assert all(h <= max([len(p) + 4 for p in payloads], default=0) for h in held)


def test_a_large_frame_in_many_chunks_then_a_small_one_in_the_same_chunk():
    big, small = os.urandom(100_000), b"tail"
    stream = _frame(big) + _frame(small) + _frame(b"x")[:2]
    r = FrameReader(max_size=1 << 20, large=1024)
    got = []
    for i in range(0, len(stream), 4096):
        got += r.feed(stream[i:i + 4096])
    assert got == [big, small]
    assert r.buffered == 2
    assert r.feed(_frame(b"x")[2:]) == [b"x"]


@given(st.binary(max_size=50), st.integers(0, 49))
def test_an_incomplete_frame_is_held_back(payload, keep):
    f = _frame(payload)
    keep = min(keep, len(f) - 1)
    r = FrameReader(max_size=100)
    assert r.feed(f[:keep]) == []
    assert r.buffered == keep
    assert r.feed(f[keep:]) == [payload]


@pytest.mark.parametrize("size", [-1, 3, 101, 2**31 - 1])
def test_a_size_out_of_range_is_an_error_naming_it(size):
    r = FrameReader(min_size=4, max_size=100)
    with pytest.raises(FrameError, match=f"invalid frame size {size}"):
        r.feed(struct.pack(">i", size) + b"\0" * 8)


def test_deferred_answers_keep_request_order_on_a_connection():
    """A DEFERRED handler answers later through ctx.respond; a pipelined request behind it
    waits (Kafka mutes the channel), so answers come back in request order."""
    parked = []

    def describe_quorum(ctx, req):
        parked.append(ctx)
        return DEFERRED

    def describe_cluster(ctx, req):  # plain function: answered at once
        return DescribeClusterResponse(cluster_id="c", controller_id=1, error_code=0)

    async def main():
        s = KafkaServer("127.0.0.1", 0, {ApiKeys.DESCRIBE_QUORUM: describe_quorum,
                                          ApiKeys.DESCRIBE_CLUSTER: describe_cluster})
        await s.start()
        c = await KafkaConnection.open("127.0.0.1", s.port)
        order = []
        t1 = asyncio.ensure_future(c.request(DescribeQuorumRequest(topics=[]), 1, timeout=5))
        t1.add_done_callback(lambda _: order.append("quorum"))
        t2 = asyncio.ensure_future(c.request(DescribeClusterRequest(), 1, timeout=5))
        t2.add_done_callback(lambda _: order.append("cluster"))
        for _ in range(100):
            if parked:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert not t2.done()  # held behind the parked request
        parked[0].respond(DescribeQuorumResponse(error_code=0, error_message=None, topics=[]))
        parked[0].respond(DescribeQuorumResponse(error_code=1))  # a second answer is ignored
        assert (await t1).error_code == 0 and (await t2).cluster_id == "c"
        await asyncio.sleep(0)
        assert order == ["quorum", "cluster"]
        await c.close()
        await s.close()
    asyncio.run(asyncio.wait_for(main(), 20))


def test_event_loop_choice_is_made_from_the_environment():
    code = "from kraft_node import event_loop as e; print(e.EVENT_LOOP)"
    for want in ("asyncio", "uvloop"):
        try:
            __import__(want)
        except ImportError:
            continue
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "KRAFT_EVENT_LOOP": want},
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == want
    bad = subprocess.run([sys.executable, "-c", code], env={**os.environ, "KRAFT_EVENT_LOOP": "x"},
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "KRAFT_EVENT_LOOP" in bad.stderr
