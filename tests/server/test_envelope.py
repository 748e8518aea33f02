"""The controller's Envelope handler (``kraft_node/network/envelope.py``; issue 24 item 6).

Unit level: the inner request is decoded and routed with its own header and version, the answer
comes back as the inner response header + body, whether the route answers at once, from a
coroutine or later through ``ctx.respond``; every malformed part of an envelope gets Kafka's
error code; an inner NOT_CONTROLLER becomes the envelope's.  The "error for every item"
responses encode at every version of their API.

Over TCP, on a real single-controller node: a CreateTopics inside an Envelope creates the
topic and is answered once it is committed; malformed envelopes are answered and the
connection stays usable; an EnvelopeRequest that does not decode closes the connection.
"""
from __future__ import annotations

import asyncio
import struct
import time

import pytest
from support.controller import broker_heartbeat, broker_registration, until_controller_active
from support.raft import cluster_properties

from kraft_node.network import KafkaConnection
from kraft_node.network.envelope import (
    FORWARDABLE_APIS,
    envelope_handler,
    error_response,
    parse_principal,
    request_payload,
    response_error_codes,
    serialize_principal,
)
from kraft_node.network.server import DEFERRED, RequestContext
from kraft_node.protocol.api_keys import API_INFO, ApiKeys
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.framing import decode_response, encode_request, encode_response
from kraft_node.protocol.generated.alter_configs import AlterConfigsRequest
from kraft_node.protocol.generated.api_versions import ApiVersionsRequest
from kraft_node.protocol.generated.create_partitions import CreatePartitionsRequest
from kraft_node.protocol.generated.create_topics import CreateTopicsRequest, CreateTopicsResponse
from kraft_node.protocol.generated.delete_topics import DeleteTopicsRequest
from kraft_node.protocol.generated.elect_leaders import ElectLeadersRequest
from kraft_node.protocol.generated.envelope import EnvelopeRequest
from kraft_node.protocol.generated.incremental_alter_configs import IncrementalAlterConfigsRequest
from kraft_node.protocol.generated.unregister_broker import UnregisterBrokerRequest
from kraft_node.protocol.headers import RequestHeader
from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode

CT = CreateTopicsRequest
ANON = serialize_principal("User", "ANONYMOUS")
LOCAL = bytes([127, 0, 0, 1])


def _create(*names: str, partitions: int = 1, rf: int = 1) -> CreateTopicsRequest:
    return CT(topics=[CT.CreatableTopic(name=n, num_partitions=partitions, replication_factor=rf, assignments=[],
                                        configs=[]) for n in names], timeout_ms=5000, validate_only=False)


def _payload(body, version: int, correlation_id: int = 77, client_id: str = "the-client") -> bytes:
    return bytes(encode_request(body, version, correlation_id, client_id)[4:])


def _envelope(data: bytes, principal: bytes | None = ANON, address: bytes = LOCAL) -> EnvelopeRequest:
    return EnvelopeRequest(request_data=data, request_principal=principal, client_host_address=address)


class _Capture:
    """Stands for the server connection: keeps what ``ctx.respond`` sends."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def answered(self, out) -> None:
        assert out is not None, "the envelope's connection was closed"
        self.frames.append(b"".join(bytes(b) for b in out) if isinstance(out, list) else bytes(out))


def _outer_ctx(conn: _Capture) -> RequestContext:
    header = RequestHeader(request_api_key=int(ApiKeys.ENVELOPE), request_api_version=0, correlation_id=5,
                           client_id="broker-1")
    return RequestContext(header, 0, ("10.0.0.9", 50000), "CONTROLLER", conn)


def _run(handler, envelope: EnvelopeRequest):
    """The EnvelopeResponse the server would send for ``envelope`` (running a coroutine answer)."""
    conn = _Capture()
    ctx = _outer_ctx(conn)
    result = handler(ctx, envelope)
    if asyncio.iscoroutine(result):
        result = asyncio.run(result)
    if result is not DEFERRED:
        ctx.respond(result)
    return conn


def _envelope_answer(conn: _Capture):
    (frame,) = conn.frames
    header, body = decode_response(frame[4:], int(ApiKeys.ENVELOPE), 0)
    assert header.correlation_id == 5
    return body


def _inner(envelope_response, api_key: int, version: int, correlation_id: int = 77):
    assert envelope_response.error_code == 0
    header, body = decode_response(envelope_response.response_data, api_key, version)
    assert header.correlation_id == correlation_id
    return body


# ---------------------------------------------------------------------- routing and answering
@pytest.mark.parametrize("version", [2, 4, 5, 7])  # header v1 before 5, v2 (flexible) from 5
def test_inner_request_routed_with_its_own_header_and_answered_with_its_header(version):
    seen = {}

    def create_topics(ctx, body):
        seen.update(key=ctx.header.request_api_key, version=ctx.api_version, corr=ctx.header.correlation_id,
                    client_id=ctx.header.client_id, peer=ctx.peer, listener=ctx.listener,
                    principal=(ctx.principal.type, ctx.principal.name), names=[t.name for t in body.topics])
        R = CreateTopicsResponse
        return R(throttle_time_ms=0, topics=[R.CreatableTopicResult(name=t.name, error_code=0, error_message=None,
                                                                    num_partitions=1, replication_factor=1)
                                             for t in body.topics])

    handler = envelope_handler({int(ApiKeys.CREATE_TOPICS): create_topics})
    answer = _envelope_answer(_run(handler, _envelope(_payload(_create("a", "b"), version))))
    inner = _inner(answer, int(ApiKeys.CREATE_TOPICS), version)
    assert [t.name for t in inner.topics] == ["a", "b"]
    assert seen == dict(key=int(ApiKeys.CREATE_TOPICS), version=version, corr=77, client_id="the-client",
                        peer=("127.0.0.1", 0), listener="CONTROLLER", principal=("User", "ANONYMOUS"),
                        names=["a", "b"])


def test_deferred_and_coroutine_routes_are_answered():
    later = []

    def deferred(ctx, body):
        later.append((ctx, body))
        return DEFERRED

    async def coroutine(ctx, body):
        await asyncio.sleep(0)
        return error_response(int(ApiKeys.DELETE_TOPICS), body, ctx.api_version, Errors.TOPIC_DELETION_DISABLED)

    handler = envelope_handler({int(ApiKeys.CREATE_TOPICS): deferred, int(ApiKeys.DELETE_TOPICS): coroutine})
    conn = _run(handler, _envelope(_payload(_create("x"), 7)))
    assert conn.frames == []  # not answered yet
    ctx, body = later.pop()
    ctx.respond(error_response(int(ApiKeys.CREATE_TOPICS), body, 7, Errors.TOPIC_ALREADY_EXISTS, "exists"))
    ctx.respond(error_response(int(ApiKeys.CREATE_TOPICS), body, 7, Errors.NONE))  # only the first counts
    inner = _inner(_envelope_answer(conn), int(ApiKeys.CREATE_TOPICS), 7)
    assert [(t.name, t.error_code, t.error_message) for t in inner.topics] == [("x", 36, "exists")]

    DT = DeleteTopicsRequest
    conn = _run(handler, _envelope(_payload(DT(topic_names=["gone"], timeout_ms=1000), 4, correlation_id=9)))
    inner = _inner(_envelope_answer(conn), int(ApiKeys.DELETE_TOPICS), 4, correlation_id=9)
    assert [(t.name, t.error_code) for t in inner.responses] == [("gone", Errors.TOPIC_DELETION_DISABLED)]


def test_inner_not_controller_becomes_the_envelopes_error():
    def standby(ctx, body):
        return error_response(int(ApiKeys.CREATE_TOPICS), body, ctx.api_version, Errors.NOT_CONTROLLER,
                              "The active controller appears to be node 2.")

    answer = _envelope_answer(_run(envelope_handler({int(ApiKeys.CREATE_TOPICS): standby}),
                                   _envelope(_payload(_create("x"), 7))))
    assert (answer.error_code, answer.response_data) == (Errors.NOT_CONTROLLER, None)


def test_no_route_and_failing_route_answer_unknown_server_error_inside():
    def broken(ctx, body):
        raise RuntimeError("a bug")

    async def broken_async(ctx, body):
        raise RuntimeError("a bug")

    handler = envelope_handler({int(ApiKeys.CREATE_TOPICS): broken, int(ApiKeys.DELETE_TOPICS): broken_async})
    inner = _inner(_envelope_answer(_run(handler, _envelope(_payload(_create("x", "y"), 6)))),
                   int(ApiKeys.CREATE_TOPICS), 6)
    assert [(t.name, t.error_code, t.error_message) for t in inner.topics] == [("x", -1, None), ("y", -1, None)]
    DT = DeleteTopicsRequest
    inner = _inner(_envelope_answer(_run(handler, _envelope(_payload(DT(topic_names=["z"], timeout_ms=1), 5)))),
                   int(ApiKeys.DELETE_TOPICS), 5)
    assert [(t.name, t.error_code) for t in inner.responses] == [("z", -1)]
    # UnregisterBroker is forwardable, but this controller has no route for it
    inner = _inner(_envelope_answer(_run(handler, _envelope(_payload(UnregisterBrokerRequest(broker_id=3), 0)))),
                   int(ApiKeys.UNREGISTER_BROKER), 0)
    assert inner.error_code == Errors.UNKNOWN_SERVER_ERROR


def test_trailing_bytes_after_the_inner_body_are_ignored():
    got = []
    handler = envelope_handler({int(ApiKeys.CREATE_TOPICS): lambda ctx, body: got.append(body) or
                                error_response(19, body, ctx.api_version, Errors.NONE)})
    answer = _envelope_answer(_run(handler, _envelope(_payload(_create("t"), 7) + b"\0\0\0")))
    assert answer.error_code == 0 and [t.name for t in got[0].topics] == ["t"]


# ---------------------------------------------------------------------- malformed envelopes
def _code(envelope: EnvelopeRequest, routes=None) -> int:
    answer = _envelope_answer(_run(envelope_handler(routes or {}), envelope))
    if answer.error_code:
        assert answer.response_data is None
    return answer.error_code


def _header_only(api_key: int, version: int) -> bytes:
    """A request header (v1, plus an empty tagged-field section for v2) and no body."""
    return struct.pack(">hhi", api_key, version, 1) + struct.pack(">h", 1) + b"x" + b"\0"


def test_malformed_envelopes_get_kafkas_codes():
    good = _payload(_create("t"), 7)
    E = Errors
    # the principal: missing, wrong version prefix, truncated
    assert _code(_envelope(good, principal=None)) == E.PRINCIPAL_DESERIALIZATION_FAILURE
    assert _code(_envelope(good, principal=struct.pack(">h", 7) + ANON[2:])) == E.PRINCIPAL_DESERIALIZATION_FAILURE
    assert _code(_envelope(good, principal=ANON[:5])) == E.PRINCIPAL_DESERIALIZATION_FAILURE
    assert _code(_envelope(good, principal=b"\0")) == E.PRINCIPAL_DESERIALIZATION_FAILURE
    # the client address: 4 or 16 bytes only
    assert _code(_envelope(good, address=b"\1\2\3")) == E.INVALID_REQUEST
    assert _code(_envelope(good, address=b"")) == E.INVALID_REQUEST
    # APIs that may not be forwarded
    assert _code(_envelope(_payload(ApiVersionsRequest(client_software_name="x", client_software_version="1"), 3))) \
        == E.INVALID_REQUEST
    assert _code(_envelope(_payload(_envelope(good), 0))) == E.INVALID_REQUEST
    assert _code(_envelope(_header_only(int(ApiKeys.FETCH), 4))) == E.INVALID_REQUEST
    assert _code(_envelope(_header_only(int(ApiKeys.BROKER_HEARTBEAT), 0))) == E.INVALID_REQUEST
    # an inner request that cannot be parsed: UNSUPPORTED_VERSION (Kafka's choice, see the module doc)
    assert _code(_envelope(b"")) == E.UNSUPPORTED_VERSION
    assert _code(_envelope(b"\0\x13")) == E.UNSUPPORTED_VERSION
    assert _code(_envelope(_header_only(999, 0))) == E.UNSUPPORTED_VERSION          # unknown api key
    assert _code(_envelope(_header_only(int(ApiKeys.CREATE_TOPICS), 1))) == E.UNSUPPORTED_VERSION  # below 2
    assert _code(_envelope(_header_only(int(ApiKeys.CREATE_TOPICS), 42))) == E.UNSUPPORTED_VERSION
    assert _code(_envelope(good[:-3])) == E.UNSUPPORTED_VERSION                    # truncated body
    assert _code(_envelope(_payload(_create("t"), 4)[:12])) == E.UNSUPPORTED_VERSION  # truncated header


def test_principal_round_trip():
    p = parse_principal(serialize_principal("User", "alice", True))
    assert (p.type, p.name, p.token_authenticated) == ("User", "alice", True)
    assert serialize_principal("User", "ANONYMOUS")[:2] == b"\0\0"  # int16 version prefix


# ---------------------------------------------------------------------- error responses
def _sample_requests():
    """One request per forwardable API kraft has a codec for, each with two items."""
    out = {}
    for key in FORWARDABLE_APIS:
        req = API_INFO[key].request
        out[key] = req
    out[int(ApiKeys.CREATE_TOPICS)] = _create("a", "b")
    out[int(ApiKeys.DELETE_TOPICS)] = DeleteTopicsRequest(
        topic_names=["a", "b"], topics=[DeleteTopicsRequest.DeleteTopicState(name="a"),
                                        DeleteTopicsRequest.DeleteTopicState(name="b")], timeout_ms=1)
    IA = IncrementalAlterConfigsRequest
    out[int(ApiKeys.INCREMENTAL_ALTER_CONFIGS)] = IA(resources=[
        IA.AlterConfigsResource(resource_type=2, resource_name="a", configs=[]),
        IA.AlterConfigsResource(resource_type=4, resource_name="1", configs=[])], validate_only=False)
    AC = AlterConfigsRequest
    out[int(ApiKeys.ALTER_CONFIGS)] = AC(resources=[
        AC.AlterConfigsResource(resource_type=2, resource_name="a", configs=[])], validate_only=False)
    CP = CreatePartitionsRequest
    out[int(ApiKeys.CREATE_PARTITIONS)] = CP(topics=[CP.CreatePartitionsTopic(name="a", count=3, assignments=None)],
                                             timeout_ms=1, validate_only=False)
    EL = ElectLeadersRequest
    out[int(ApiKeys.ELECT_LEADERS)] = EL(election_type=0, topic_partitions=[
        EL.TopicPartitions(topic="a", partitions=[0, 1])], timeout_ms=1)
    return out


@pytest.mark.parametrize("key", sorted(FORWARDABLE_APIS), ids=lambda k: API_INFO[k].name)
@pytest.mark.parametrize("error", [Errors.REQUEST_TIMED_OUT, Errors.NOT_CONTROLLER, Errors.UNKNOWN_SERVER_ERROR])
def test_error_response_every_version(key, error):
    info = API_INFO[key]
    sample = _sample_requests()[key]
    request = sample() if isinstance(sample, type) else sample
    for version in range(info.lowest, info.highest + 1):
        resp = error_response(key, request, version, error, "why")
        assert type(resp) is info.response
        frame = bytes(encode_response(resp, version, 1)[4:])
        _h, back = decode_response(frame, key, version)
        codes = response_error_codes(back)
        assert int(error) in codes, (info.name, version, codes)
        assert codes <= {int(error), 0}
        if key == ApiKeys.CREATE_TOPICS:
            message = None if error == Errors.UNKNOWN_SERVER_ERROR else "why"  # nothing internal leaks
            assert [(t.name, t.error_message) for t in back.topics] == [("a", message), ("b", message)]
        if key == ApiKeys.ELECT_LEADERS:
            assert [(p.partition_id, p.error_code) for p in back.replica_election_results[0].partition_result] \
                == [(0, error), (1, error)]
        if key == ApiKeys.DELETE_TOPICS:
            assert [t.name for t in back.responses] == ["a", "b"]
        if key == ApiKeys.INCREMENTAL_ALTER_CONFIGS:
            assert [(r.resource_type, r.resource_name) for r in back.responses] == [(2, "a"), (4, "1")]


def test_request_payload_is_the_client_frame():
    header = RequestHeader(request_api_key=19, request_api_version=7, correlation_id=77, client_id="the-client")
    assert request_payload(header, _create("q"), 7) == _payload(_create("q"), 7)
    header = RequestHeader(request_api_key=19, request_api_version=3, correlation_id=77, client_id="the-client")
    assert request_payload(header, _create("q"), 3) == _payload(_create("q"), 3)


# ---------------------------------------------------------------------- over TCP, a real controller


async def _unfenced_broker(conn, cluster_id: str, broker_id: int = 0) -> None:
    reg = await conn.request(broker_registration(broker_id, cluster_id), 4, timeout=5)
    assert reg.error_code == 0
    deadline = time.monotonic() + 10
    while True:
        hb = await conn.request(broker_heartbeat(broker_id, reg.broker_epoch, reg.broker_epoch), 1, timeout=5)
        assert hb.error_code == 0
        if not hb.is_fenced:
            return
        assert time.monotonic() < deadline, "the broker stayed fenced"
        await asyncio.sleep(0.02)


def test_envelope_over_tcp_on_a_controller_node(tmp_path):
    (path,) = cluster_properties(str(tmp_path), 1)
    cfg = NodeConfig.from_file(path)

    async def go():
        node = KraftNode.from_config(cfg, controller=True)
        if int(ApiKeys.ENVELOPE) not in node.routes:  # the node registers it on controllers
            node.register({int(ApiKeys.ENVELOPE): envelope_handler(node.routes)})
        await node.start()
        try:
            await until_controller_active(node)
            ctl = node.controller.controller
            conn = await KafkaConnection.open("127.0.0.1", node.port, timeout=5)
            try:
                versions = await conn.request(ApiVersionsRequest(client_software_name="t",
                                                                 client_software_version="1"), 3, timeout=5)
                assert int(ApiKeys.ENVELOPE) in {k.api_key for k in versions.api_keys}
                await _unfenced_broker(conn, ctl.cluster_id)

                # CreateTopics v7 and v4 inside envelopes: created, committed when answered
                for version, name in ((7, "enveloped"), (4, "old-header")):
                    answer = await conn.request(_envelope(_payload(_create(name, partitions=2), version,
                                                                   correlation_id=1234)), 0, timeout=10)
                    inner = _inner(answer, int(ApiKeys.CREATE_TOPICS), version, correlation_id=1234)
                    assert [(t.name, t.error_code) for t in inner.topics] == [(name, 0)]
                    committed = ctl.committed_epoch()
                    topic_id = ctl.replication_control.topic_id(name, epoch=committed)
                    assert topic_id is not None
                    assert sorted(ctl.replication_control.partitions(topic_id, epoch=committed)) == [0, 1]
                    if version >= 7:
                        assert inner.topics[0].topic_id == topic_id

                # the controller's own validation answers inside the envelope
                answer = await conn.request(_envelope(_payload(_create("enveloped"), 7)), 0, timeout=10)
                inner = _inner(answer, int(ApiKeys.CREATE_TOPICS), 7)
                assert (inner.topics[0].error_code, inner.topics[0].error_message) == (
                    Errors.TOPIC_ALREADY_EXISTS, "Topic 'enveloped' already exists.")

                # malformed envelopes are answered; the connection stays usable
                for bad, code in ((_envelope(_payload(ApiVersionsRequest(), 0)), Errors.INVALID_REQUEST),
                                  (_envelope(b"\0\x13\0"), Errors.UNSUPPORTED_VERSION),
                                  (_envelope(_payload(_create("x"), 7), principal=None),
                                   Errors.PRINCIPAL_DESERIALIZATION_FAILURE),
                                  (_envelope(_payload(_create("x"), 7), address=b"\1"), Errors.INVALID_REQUEST)):
                    answer = await conn.request(bad, 0, timeout=5)
                    assert (answer.error_code, answer.response_data) == (code, None)
                assert ctl.replication_control.topic_id("x") is None

                DT = DeleteTopicsRequest
                answer = await conn.request(_envelope(_payload(DT(topic_names=["old-header"], timeout_ms=5000), 5)),
                                            0, timeout=10)
                inner = _inner(answer, int(ApiKeys.DELETE_TOPICS), 5)
                assert [(t.name, t.error_code) for t in inner.responses] == [("old-header", 0)]
                assert ctl.replication_control.topic_id("old-header", epoch=ctl.committed_epoch()) is None
            finally:
                await conn.close()

            # an EnvelopeRequest that does not decode closes the connection (as any undecodable request)
            reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
            try:
                header = struct.pack(">hhi", int(ApiKeys.ENVELOPE), 0, 3) + struct.pack(">h", 1) + b"b" + b"\0"
                garbage = header + b"\x7f\x7f"  # request_data says 126 bytes follow; there are none
                writer.write(struct.pack(">i", len(garbage)) + garbage)
                await writer.drain()
                assert await asyncio.wait_for(reader.read(), 5) == b""
            finally:
                writer.close()
        finally:
            await node.close()

    asyncio.run(asyncio.wait_for(go(), 60))
