"""The asyncio Kafka-protocol server and client, over real sockets on 127.0.0.1."""
import asyncio
import socket
import struct

import pytest

from kraft_node.network import ConnectionClosed, KafkaConnection, KafkaServer, RequestTimeout
from kraft_node.protocol.api_keys import API_INFO, ApiKeys
from kraft_node.protocol.framing import decode_response
from kraft_node.protocol.generated.api_versions import ApiVersionsRequest
from kraft_node.protocol.generated.describe_cluster import DescribeClusterRequest, DescribeClusterResponse


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def _server(handlers=None, **kw):
    s = KafkaServer("127.0.0.1", 0, handlers or {}, listener_type="controller", **kw)
    await s.start()
    return s


def test_api_versions_and_a_handler():
    async def describe(ctx, req):
        assert ctx.api_version == 1 and ctx.header.client_id == "kraft"
        return DescribeClusterResponse(cluster_id="abc", controller_id=1, error_code=0)

    async def main():
        s = await _server({ApiKeys.DESCRIBE_CLUSTER: describe})
        c = await KafkaConnection.open("127.0.0.1", s.port)
        for v in range(API_INFO[ApiKeys.API_VERSIONS].lowest, API_INFO[ApiKeys.API_VERSIONS].highest + 1):
            resp = await c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), v)
            assert resp.error_code == 0
            # only what this server answers: a client must not pick an API that closes the connection
            assert {k.api_key for k in resp.api_keys} == {ApiKeys.API_VERSIONS, ApiKeys.DESCRIBE_CLUSTER}
        # pipelined requests come back matched to their callers
        rs = await asyncio.gather(*[c.request(DescribeClusterRequest(), 1) for _ in range(20)])
        assert {r.cluster_id for r in rs} == {"abc"}
        await c.close()
        await s.close()
    run(main())


def _raw_exchange(port, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        out = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return out
            out += chunk
            if len(out) >= 4 and len(out) >= 4 + struct.unpack_from(">i", out)[0]:
                return out


def test_unsupported_api_versions_version_gets_error_35_at_v0():
    async def main():
        s = await _server()
        port = s.port
        # ApiVersions v99: header v2 layout is unknown to the server, but it answers with v0 + error 35
        frame = struct.pack(">hhi", 18, 99, 7) + struct.pack(">h", 1) + b"x" + b"\x00" + b"\x00"
        data = struct.pack(">i", len(frame)) + frame
        out = await asyncio.to_thread(_raw_exchange, port, data)
        _, resp = decode_response(out[4:], ApiKeys.API_VERSIONS, 0)
        assert resp.error_code == 35 and [k.api_key for k in resp.api_keys] == [18]
        await s.close()
    run(main())


@pytest.mark.parametrize("garbage", [
    struct.pack(">i", -5),                      # negative size
    struct.pack(">i", 2**31 - 1),               # oversize
    struct.pack(">i", 6) + b"\x7f\x7f\x00\x00\x00\x01",   # unknown api key
    struct.pack(">i", 4) + b"\x00\x12\x00\x03",           # truncated header
])
def test_malformed_requests_close_the_connection_but_not_the_server(garbage):
    async def main():
        s = await _server()
        out = await asyncio.to_thread(_raw_exchange, s.port, garbage)
        assert out == b""  # closed without a response
        c = await KafkaConnection.open("127.0.0.1", s.port)   # still serving
        assert (await c.request(ApiVersionsRequest(), 3)).error_code == 0
        await c.close()
        await s.close()
    run(main())


def test_handler_error_closes_connection_and_fails_waiters():
    async def boom(ctx, req):
        raise RuntimeError("handler bug")

    async def main():
        s = await _server({ApiKeys.DESCRIBE_CLUSTER: boom})
        c = await KafkaConnection.open("127.0.0.1", s.port)
        with pytest.raises(ConnectionClosed):
            await c.request(DescribeClusterRequest(), 1, timeout=5)
        with pytest.raises(ConnectionClosed):
            await c.request(DescribeClusterRequest(), 1)
        await c.close()
        await s.close()
    run(main())


def test_request_timeout():
    async def slow(ctx, req):
        await asyncio.sleep(5)

    async def main():
        s = await _server({ApiKeys.DESCRIBE_CLUSTER: slow})
        c = await KafkaConnection.open("127.0.0.1", s.port)
        with pytest.raises(RequestTimeout, match="timed out"):
            await c.request(DescribeClusterRequest(), 1, timeout=0.2)
        await c.close()
        await s.close()
    run(main())


def test_kafka_python_client_frames_are_understood():
    # kafka-python's own encoder builds the request (header v2 + ApiVersions v3 body) and
    # decodes our answer: an independent check of header versions and framing.
    from kafka.protocol.metadata import ApiVersionsRequest as KPReq
    from kafka.protocol.metadata import ApiVersionsResponse as KPResp

    async def main():
        async def vote(ctx, req):
            raise AssertionError("not called")
        s = await _server({ApiKeys.VOTE: vote})
        req = KPReq(version=3, client_software_name="kp", client_software_version="1")
        req.with_header(correlation_id=42, client_id="kp")
        out = await asyncio.to_thread(_raw_exchange, s.port, bytes(req.encode(header=True, framed=True)))
        resp = KPResp.decode(out[4:], version=3, header=True)
        assert resp.error_code == 0
        assert {k.api_key for k in resp.api_keys} == {18, 52}  # ApiVersions and the Vote handler
        await s.close()
    run(main())


def test_a_held_request_goes_out_only_when_written_and_an_abandoned_one_fails_its_caller():
    """``send(..., hold=True)`` encodes and registers a request without writing it (a
    follower's Fetch waiting for its fsync): the server sees nothing until ``write_held``;
    ``abandon`` gives the caller the error at once and cancels its timeout."""
    seen = []

    async def describe(ctx, req):
        seen.append(ctx.header.correlation_id)
        return DescribeClusterResponse(cluster_id="abc", controller_id=1, error_code=0)

    async def main():
        s = await _server({ApiKeys.DESCRIBE_CLUSTER: describe})
        c = await KafkaConnection.open("127.0.0.1", s.port)
        loop = asyncio.get_running_loop()
        got = loop.create_future()
        corr, frame = c.send(DescribeClusterRequest(), 1, 5.0,
                             lambda r, e: got.set_result((r, e)), hold=True)
        await asyncio.sleep(0.1)
        assert seen == [] and not got.done()
        # another request overtakes the held one on the wire; both are answered to their callers
        other = await c.request(DescribeClusterRequest(), 1)
        assert other.cluster_id == "abc" and len(seen) == 1 and seen[0] != corr
        c.write_held(corr, frame)
        resp, exc = await got
        assert exc is None and resp.cluster_id == "abc" and seen[-1] == corr
        # abandoned: the callback has the error now, nothing is sent, no timeout fires later
        failed = loop.create_future()
        corr2, _frame2 = c.send(DescribeClusterRequest(), 1, 0.2,
                                lambda r, e: failed.set_result((r, e)), hold=True)
        c.abandon(corr2, ConnectionClosed("gone"))
        resp, exc = await failed
        assert resp is None and isinstance(exc, ConnectionClosed)
        c.write_held(corr2, _frame2)  # no longer pending: not written
        await asyncio.sleep(0.4)
        assert corr2 not in seen and len(seen) == 2
        await c.close()
        await s.close()
    run(main())
