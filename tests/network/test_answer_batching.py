"""The server's answers collected per loop iteration, and the cached heartbeat answer frames.

What is pinned here: a connection's answers still go out in request order, byte for byte
what the codec writes, several of them in one transport write when they are given in one
loop iteration; answers given before a close still reach the client; the controller's
cached BrokerHeartbeat frames equal the codec's output for every correlation id, success
and error (an error answer keeps the schema's defaults, e.g. IsFenced true)."""
import asyncio
import struct

import pytest

from kraft_node.metadata.controller.errors import ApiError, ControllerTimeoutError
from kraft_node.network import KafkaConnection, KafkaServer
from kraft_node.network.server import DEFERRED, _ServerConnection
from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.framing import ResponseFrames, decode_response, encode_request, encode_response
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest, BrokerHeartbeatResponse
from kraft_node.protocol.generated.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from kraft_node.server.controller_apis import ControllerApis


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


class _Transport:
    def __init__(self):
        self.writes: list[bytes] = []
        self.closed = False

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default

    def write(self, data):
        self.writes.append(bytes(data))

    def writelines(self, bufs):
        self.writes.append(b"".join(bytes(b) for b in bufs))

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def close(self):
        self.closed = True


def _frames(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        size, = struct.unpack_from(">i", data, pos)
        out.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    assert pos == len(data)
    return out


def test_answers_of_one_loop_iteration_go_out_in_order_in_one_write():
    held = []

    def describe(ctx, _req):
        held.append(ctx)
        return DEFERRED

    async def main():
        server = KafkaServer("127.0.0.1", 0, {ApiKeys.DESCRIBE_CLUSTER: describe})
        conn = _ServerConnection(server)
        t = _Transport()
        conn.connection_made(t)
        conn.data_received(b"".join(encode_request(DescribeClusterRequest(), 1, cid) for cid in range(5)))
        # one request at a time: the second is dispatched only once the first is answered
        for i in range(5):
            assert len(held) == i + 1
            held[i].respond(DescribeClusterResponse(cluster_id=f"c{i}", controller_id=i, error_code=0))
        assert t.writes == []  # not yet: once per loop iteration
        await asyncio.sleep(0)
        assert len(t.writes) == 1
        got = [decode_response(p, ApiKeys.DESCRIBE_CLUSTER, 1) for p in _frames(t.writes[0])]
        assert [(h.correlation_id, b.cluster_id) for h, b in got] == [(i, f"c{i}") for i in range(5)]
        expected = b"".join(bytes(encode_response(DescribeClusterResponse(cluster_id=f"c{i}", controller_id=i,
                                                                          error_code=0), 1, i))
                            for i in range(5))
        assert t.writes[0] == expected
    run(main())


def test_answers_given_before_a_close_are_written_before_it():
    held = []

    def describe(ctx, _req):
        if held:
            raise RuntimeError("a handler bug on the second request")
        held.append(ctx)
        return DEFERRED

    async def main():
        server = KafkaServer("127.0.0.1", 0, {ApiKeys.DESCRIBE_CLUSTER: describe})
        conn = _ServerConnection(server)
        t = _Transport()
        conn.connection_made(t)
        conn.data_received(b"".join(encode_request(DescribeClusterRequest(), 1, cid) for cid in (7, 8)))
        # the first answer is pending when the second request's handler fails and closes
        held[0].respond(DescribeClusterResponse(cluster_id="x", controller_id=1, error_code=0))
        assert t.closed and len(t.writes) == 1
        assert decode_response(_frames(t.writes[0])[0], ApiKeys.DESCRIBE_CLUSTER, 1)[0].correlation_id == 7
        await asyncio.sleep(0)  # the loop's flush finds nothing more to write
        assert len(t.writes) == 1
    run(main())


def test_pipelined_requests_over_a_socket_are_all_answered_in_order():
    held: list = []

    def describe(ctx, _req):
        held.append(ctx)
        # answer on the next iteration, several connections' answers in one flush
        asyncio.get_running_loop().call_soon(
            ctx.respond, DescribeClusterResponse(cluster_id=str(ctx.header.correlation_id), controller_id=1,
                                                 error_code=0))
        return DEFERRED

    async def main():
        s = KafkaServer("127.0.0.1", 0, {ApiKeys.DESCRIBE_CLUSTER: describe}, listener_type="controller")
        await s.start()
        conns = [await KafkaConnection.open("127.0.0.1", s.port) for _ in range(3)]
        rs = await asyncio.gather(*[c.request(DescribeClusterRequest(), 1) for c in conns for _ in range(30)])
        assert len(rs) == 90 and all(r.error_code == 0 for r in rs)
        for c in conns:
            await c.close()
        await s.close()
    run(main())


@pytest.mark.parametrize("cid", [0, 1, 255, 65536, 2**31 - 1, -1])
def test_response_frames_equal_the_codec_for_any_correlation_id(cid):
    frames = ResponseFrames()
    body = BrokerHeartbeatResponse(throttle_time_ms=0, error_code=0, is_caught_up=True, is_fenced=False,
                                   should_shut_down=False)
    for v in (0, 1):
        assert bytes(frames.frame(("ok", v), v, cid, lambda: body)) == bytes(encode_response(body, v, cid))
        # the second use comes from the table, and is still right
        assert bytes(frames.frame(("ok", v), v, cid, lambda: None)) == bytes(encode_response(body, v, cid))


def test_response_frames_table_is_bounded():
    frames = ResponseFrames(max_entries=4)
    for i in range(10):
        frames.frame(i, 0, 1, lambda i=i: BrokerHeartbeatResponse(throttle_time_ms=i, error_code=0))
    assert len(frames._frames) <= 4


class _FakeController:
    """Answers heartbeats at once with what the test says."""

    def __init__(self, outcome):
        self.outcome = outcome
        self.tracked: list = []

    def track_broker_heartbeat(self, broker_id, broker_epoch):
        self.tracked.append((broker_id, broker_epoch))
        return True

    def answer_broker_heartbeat(self, request, answer, *, deadline_ns=None, context=None):
        assert deadline_ns is not None and context is not None  # the RPC layer passes its context
        if isinstance(self.outcome, BaseException):
            answer(context, None, self.outcome)
        else:
            answer(context, self.outcome, None)


class _Reply:
    def __init__(self, caught_up, fenced, shut_down):
        self.is_caught_up, self.is_fenced, self.should_shut_down = caught_up, fenced, shut_down
        self.in_controlled_shutdown = False


class _Ctx:
    def __init__(self, version, cid):
        self.api_version = version
        self.header = type("H", (), {"correlation_id": cid, "request_api_key": int(ApiKeys.BROKER_HEARTBEAT)})()
        self.frames: list = []
        self.responses: list = []

    def respond_frame(self, out):
        self.frames.append(bytes(out))

    def respond(self, response):
        self.responses.append(response)


@pytest.mark.parametrize("outcome, expected", [
    (_Reply(True, False, False), BrokerHeartbeatResponse(throttle_time_ms=0, error_code=0, is_caught_up=True,
                                                         is_fenced=False, should_shut_down=False)),
    (_Reply(False, True, False), BrokerHeartbeatResponse(throttle_time_ms=0, error_code=0, is_caught_up=False,
                                                         is_fenced=True, should_shut_down=False)),
    (_Reply(True, False, True), BrokerHeartbeatResponse(throttle_time_ms=0, error_code=0, is_caught_up=True,
                                                        is_fenced=False, should_shut_down=True)),
    (ApiError(Errors.STALE_BROKER_EPOCH, "Expected broker epoch 3, but got broker epoch 2"),
     BrokerHeartbeatResponse(throttle_time_ms=0, error_code=int(Errors.STALE_BROKER_EPOCH))),
    (ControllerTimeoutError(), BrokerHeartbeatResponse(throttle_time_ms=0, error_code=int(Errors.REQUEST_TIMED_OUT))),
    (RuntimeError("a bug"), BrokerHeartbeatResponse(throttle_time_ms=0, error_code=int(Errors.UNKNOWN_SERVER_ERROR))),
])
def test_heartbeat_answers_are_the_codecs_bytes(outcome, expected):
    ctl = _FakeController(outcome)
    apis = ControllerApis(ctl, node_id=1, clock_ns=lambda: 0)
    req = BrokerHeartbeatRequest(broker_id=4, broker_epoch=9, current_metadata_offset=9)
    for version in (0, 1):
        for cid in (3, 70000):
            ctx = _Ctx(version, cid)
            assert apis.handle_broker_heartbeat(ctx, req) is DEFERRED
            assert ctx.frames == [bytes(encode_response(expected, version, cid))]
    assert ctl.tracked[0] == (4, 9)  # the contact time is recorded before the event
    if isinstance(outcome, BaseException):
        assert expected.is_fenced  # an error answer keeps the schema's default (IsFenced true)


def test_pipelined_requests_are_dispatched_at_once_and_answered_in_request_order():
    from kraft_node.network.server import pipelined
    held: list = []
    plain: list = []

    @pipelined
    def heartbeat(ctx, _req):
        held.append(ctx)
        return DEFERRED

    def describe(ctx, _req):
        plain.append(ctx)
        return DEFERRED

    async def main():
        server = KafkaServer("127.0.0.1", 0, {ApiKeys.BROKER_HEARTBEAT: heartbeat,
                                              ApiKeys.DESCRIBE_CLUSTER: describe})
        conn = _ServerConnection(server)
        t = _Transport()
        conn.connection_made(t)
        hb = [encode_request(BrokerHeartbeatRequest(broker_id=i, broker_epoch=1), 1, i) for i in range(3)]
        conn.data_received(b"".join(hb) + encode_request(DescribeClusterRequest(), 1, 3) + hb[0])
        assert [c.header.correlation_id for c in held] == [0, 1, 2]  # all three at once
        assert plain == []  # not pipelined: waits until every earlier request is answered

        def ok(i):
            return BrokerHeartbeatResponse(throttle_time_ms=0, error_code=0, is_caught_up=True, is_fenced=i % 2 == 0,
                                           should_shut_down=False)
        held[2].respond(ok(2))
        held[1].respond(ok(1))
        await asyncio.sleep(0)
        assert t.writes == [] and plain == []  # the first is not answered yet: nothing may go out
        held[0].respond(ok(0))
        assert len(plain) == 1  # now the DescribeCluster runs, alone
        await asyncio.sleep(0)
        assert len(t.writes) == 1
        got = [decode_response(p, ApiKeys.BROKER_HEARTBEAT, 1) for p in _frames(t.writes[0])]
        assert [(h.correlation_id, b.is_fenced) for h, b in got] == [(0, True), (1, False), (2, True)]
        assert len(held) == 3  # the heartbeat after the DescribeCluster waits for it
        plain[0].respond(DescribeClusterResponse(cluster_id="c", controller_id=1, error_code=0))
        assert len(held) == 4
        held[3].respond(ok(0))
        await asyncio.sleep(0)
        frames = [p for w in t.writes[1:] for p in _frames(w)]
        assert [decode_response(p, k, 1)[0].correlation_id
                for p, k in zip(frames, (ApiKeys.DESCRIBE_CLUSTER, ApiKeys.BROKER_HEARTBEAT))] == [3, 0]
    run(main())


def test_a_failed_pipelined_request_closes_after_the_earlier_answers():
    from kraft_node.network.server import pipelined
    held: list = []

    @pipelined
    def heartbeat(ctx, req):
        if req.broker_id == 1:
            raise RuntimeError("a handler bug")
        held.append(ctx)
        return DEFERRED

    async def main():
        server = KafkaServer("127.0.0.1", 0, {ApiKeys.BROKER_HEARTBEAT: heartbeat})
        conn = _ServerConnection(server)
        t = _Transport()
        conn.connection_made(t)
        conn.data_received(b"".join(encode_request(BrokerHeartbeatRequest(broker_id=i, broker_epoch=1), 1, i)
                                    for i in range(3)))
        assert len(held) == 1 and not t.closed  # request 1 failed; request 0 is still in progress
        held[0].respond(BrokerHeartbeatResponse(throttle_time_ms=0, error_code=0))
        assert t.closed and len(t.writes) == 1  # request 0's answer, then the close
        assert decode_response(_frames(t.writes[0])[0], ApiKeys.BROKER_HEARTBEAT, 1)[0].correlation_id == 0
    run(main())


def test_decode_request_is_the_same_from_its_codec_table_and_still_refuses_unsupported_versions():
    from kraft_node.protocol.framing import UnsupportedApiError, decode_request
    req = BrokerHeartbeatRequest(broker_id=3, broker_epoch=77, current_metadata_offset=70, want_fence=True)
    for version in (0, 1):
        payload = bytes(encode_request(req, version, 5, "c"))[4:]
        first = decode_request(payload)
        again = decode_request(payload + b"\0\0")  # from the table; trailing bytes ignored, as Kafka does
        assert (first[0].correlation_id, first[0].client_id, first[1]) == (5, "c", req)
        assert (again[0].correlation_id, again[0].client_id, again[1]) == (5, "c", req)
    bad = bytearray(bytes(encode_request(req, 1, 5, "c"))[4:])
    struct.pack_into(">h", bad, 2, 99)  # a version nobody supports
    with pytest.raises(UnsupportedApiError):
        decode_request(bytes(bad))


def test_the_pipelined_flag_is_cached_per_handler_and_follows_a_replaced_handler():
    """``_is_pipelined`` runs per request and caches per api key; replacing the handlers (the
    broker swaps its whole dict when it starts serving) or one handler must be seen."""
    from kraft_node.network.server import KafkaServer, pipelined

    @pipelined
    def fast(ctx, body):
        return None

    def plain(ctx, body):
        return None

    payload = int(ApiKeys.BROKER_HEARTBEAT).to_bytes(2, "big") + b"\x00\x01" + b"\x00" * 8
    server = KafkaServer("127.0.0.1", 0, {int(ApiKeys.BROKER_HEARTBEAT): fast})
    assert server._is_pipelined(payload) and server._is_pipelined(payload)
    server.handlers = {int(ApiKeys.BROKER_HEARTBEAT): plain}
    assert not server._is_pipelined(payload)
    server.handlers[int(ApiKeys.BROKER_HEARTBEAT)] = fast
    assert server._is_pipelined(payload)
    del server.handlers[int(ApiKeys.BROKER_HEARTBEAT)]
    assert not server._is_pipelined(payload)
    assert not server._is_pipelined(b"\x00")  # too short for an api key
