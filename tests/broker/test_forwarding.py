"""The broker forwards admin writes to the active controller (``kraft_node/broker/forwarding.py``;
issue 24 item 6).

With a fake controller channel: the client's request is wrapped as the client sent it (its
header, version and correlation id; the principal; the client's IP), the controller's answer is
unwrapped for the client, and each way forwarding can fail gives the client Kafka's answer
(REQUEST_TIMED_OUT, NOT_CONTROLLER, UNKNOWN_SERVER_ERROR, or the connection closed).  The
config writes are pre-checked on the broker as Kafka's ConfigAdminManager does.  Auto-creation
sends one CreateTopics per topic at a time.

Over TCP: a broker listener serving ``forwarding_handlers()`` in front of a real controller node
reached through the real ControllerChannel; CreateTopics (v2 and v7), CreatePartitions,
IncrementalAlterConfigs and DeleteTopics (v1 and v6) sent by a client to the broker take effect
on the controller, committed when the client gets the answer; with no controller, the client
gets REQUEST_TIMED_OUT.
"""
from __future__ import annotations

import asyncio
import logging
import time

import pytest
from support.controller import broker_heartbeat, broker_registration, until_controller_active
from support.raft import cluster_properties

from kraft_node.broker.controller_channel import (
    ControllerChannel,
    ControllerUnavailableError,
    UnsupportedControllerVersionError,
)
from kraft_node.broker.forwarding import COMMIT_GRACE_S, FORWARDED_APIS, ForwardedVersionMismatch, ForwardingManager
from kraft_node.metadata.controller.configuration_control import ConfigResource
from kraft_node.network import KafkaConnection
from kraft_node.network.envelope import envelope_handler, parse_principal
from kraft_node.network.server import KafkaServer, RequestContext
from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.framing import decode_request, decode_response, encode_request, encode_response
from kraft_node.protocol.generated.create_partitions import CreatePartitionsRequest
from kraft_node.protocol.generated.create_topics import CreateTopicsRequest, CreateTopicsResponse
from kraft_node.protocol.generated.delete_topics import DeleteTopicsRequest
from kraft_node.protocol.generated.envelope import EnvelopeResponse
from kraft_node.protocol.generated.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kraft_node.protocol.headers import RequestHeader
from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode

CT = CreateTopicsRequest
IA = IncrementalAlterConfigsRequest
E = Errors
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8


def _create(*names: str, partitions: int = 1, rf: int = 1) -> CreateTopicsRequest:
    return CT(topics=[CT.CreatableTopic(name=n, num_partitions=partitions, replication_factor=rf, assignments=[],
                                        configs=[]) for n in names], timeout_ms=5000, validate_only=False)


def _client_ctx(body, version: int, correlation_id: int = 31, peer=("192.0.2.7", 40000)) -> RequestContext:
    """What the broker listener hands a handler: the client's header as decoded from its frame."""
    header, _body = decode_request(bytes(encode_request(body, version, correlation_id, "admin-1")[4:]))
    return RequestContext(header, version, peer, "PLAINTEXT", None)


class FakeChannel:
    """The controller channel's ``send``, answering with ``answer(envelope)`` (or raising it)."""

    request_timeout_s = 30.0

    def __init__(self, answer) -> None:
        self.answer = answer
        self.sent: list[tuple[object, int | None, float | None]] = []

    async def send(self, body, version=None, *, timeout_s=None, restamp=None):
        self.sent.append((body, version, timeout_s))
        self.restamp = restamp
        await asyncio.sleep(0)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer(body)


def _controller(routes):
    """A channel whose 'controller' is the real Envelope handler over ``routes``, in memory."""
    handler = envelope_handler(routes)

    class _Conn:
        def __init__(self):
            self.out = None

        def answered(self, out):
            self.out = bytes(out[0]) if isinstance(out, list) else bytes(out)

    def answer(envelope):
        conn = _Conn()
        header = RequestHeader(request_api_key=58, request_api_version=0, correlation_id=1, client_id="b")
        ctx = RequestContext(header, 0, ("127.0.0.1", 1), "CONTROLLER", conn)
        result = handler(ctx, envelope)
        ctx.respond(result)
        return decode_response(conn.out[4:], 58, 0)[1]

    return FakeChannel(answer)


def _ok_create(ctx, body):
    R = CreateTopicsResponse
    return R(throttle_time_ms=0, topics=[R.CreatableTopicResult(name=t.name, error_code=0, error_message=None,
                                                                num_partitions=3, replication_factor=1)
                                         for t in body.topics])


# ---------------------------------------------------------------------- wrapping and unwrapping
@pytest.mark.parametrize("version", [2, 4, 5, 7])
def test_request_wrapped_as_the_client_sent_it_and_answer_unwrapped(version):
    seen = []

    def route(ctx, body):
        seen.append((ctx.header.correlation_id, ctx.header.client_id, ctx.api_version, ctx.peer[0],
                     ctx.principal.name))
        return _ok_create(ctx, body)

    channel = _controller({int(ApiKeys.CREATE_TOPICS): route})
    fm = ForwardingManager(channel, node_id=1, timeout_s=7.5)
    request = _create("a", "b")
    resp = asyncio.run(fm.forward(_client_ctx(request, version), request))
    n = 3 if version >= 5 else -1  # num_partitions is in the answer from v5 on
    assert [(t.name, t.error_code, t.num_partitions) for t in resp.topics] == [("a", 0, n), ("b", 0, n)]
    ((envelope, env_version, timeout_s),) = channel.sent
    assert (env_version, timeout_s) == (0, 7.5)
    # request_data is byte for byte the payload of the client's frame
    assert envelope.request_data == bytes(encode_request(request, version, 31, "admin-1")[4:])
    assert envelope.client_host_address == bytes([192, 0, 2, 7])
    p = parse_principal(envelope.request_principal)
    assert (p.type, p.name, p.token_authenticated) == ("User", "ANONYMOUS", False)
    assert seen == [(31, "admin-1", version, "192.0.2.7", "ANONYMOUS")]
    assert fm.in_flight == 0


class Resending:
    """A channel that keeps resending (as it does after lost connections or NOT_CONTROLLER),
    asking ``restamp`` before every attempt, ``pause`` seconds apart, until restamp says stop."""

    request_timeout_s = 30.0

    def __init__(self, pause: float) -> None:
        self.pause = pause
        self.sent: list = []
        self.timeout_s = None

    async def send(self, body, version=None, *, timeout_s=None, restamp=None):
        self.timeout_s = timeout_s
        assert restamp is not None
        while True:
            asked_at = time.monotonic()
            if (envelope := restamp()) is None:
                break
            self.sent.append((asked_at, envelope))
            await asyncio.sleep(self.pause)
        raise ControllerUnavailableError("CreateTopics not sent again: its own deadline has passed")


@pytest.mark.parametrize("own_timeout_s, expected_bound", [(None, 0.4 + COMMIT_GRACE_S), (3.0, 3.0)])
def test_resends_carry_what_is_left_of_the_clients_timeout_and_stop_when_it_is_spent(own_timeout_s,
                                                                                     expected_bound):
    """A resend must not start the client's write after the client stopped waiting (a client that
    re-asked elsewhere and then deleted the topic would see it come back): the first attempt is the
    client's request byte for byte, each resend carries the time left of its ``timeout_ms``, none
    goes out once it is spent, and the client gets REQUEST_TIMED_OUT."""
    channel = Resending(pause=0.1)
    fm = ForwardingManager(channel, timeout_s=own_timeout_s)
    request = _create("a", "b")
    request.timeout_ms = 400
    resp = asyncio.run(fm.forward(_client_ctx(request, 7), request))
    assert [(t.name, t.error_code) for t in resp.topics] == [("a", E.REQUEST_TIMED_OUT), ("b", E.REQUEST_TIMED_OUT)]
    assert channel.timeout_s == pytest.approx(expected_bound)
    assert len(channel.sent) >= 2
    (first_at, first), *resends = channel.sent  # the deadline was set just before first_at
    assert first.request_data == bytes(encode_request(request, 7, 31, "admin-1")[4:])
    previous = 400
    for at, envelope in resends:
        header, body = decode_request(envelope.request_data)
        assert (header.correlation_id, header.client_id) == (31, "admin-1")
        assert [t.name for t in body.topics] == ["a", "b"]
        assert 0 < body.timeout_ms <= previous and body.timeout_ms <= 400 - (at - first_at) * 1000 + 1
        previous = body.timeout_ms
        assert at - first_at < 0.4
    assert request.timeout_ms == 400  # the client's request object is not changed


def test_a_request_with_no_deadline_keeps_the_channels_deadline_and_is_sent_as_is():
    channel = _controller({int(ApiKeys.CREATE_TOPICS): _ok_create})
    fm = ForwardingManager(channel, timeout_s=7.5)
    request = _create("a")
    request.timeout_ms = 0  # no deadline to carry (the controller sets none either)
    resp = asyncio.run(fm.forward(_client_ctx(request, 7), request))
    assert [(t.name, t.error_code) for t in resp.topics] == [("a", 0)]
    assert channel.restamp is None and channel.sent[0][2] == 7.5


def test_ipv6_client_and_unknown_peer_address():
    channel = _controller({int(ApiKeys.CREATE_TOPICS): _ok_create})
    fm = ForwardingManager(channel, client_host="10.1.2.3")
    request = _create("a")
    asyncio.run(fm.forward(_client_ctx(request, 7, peer=("::1", 5, 0, 0)), request))
    asyncio.run(fm.forward(_client_ctx(request, 7, peer=("?", 0)), request))
    assert [s[0].client_host_address for s in channel.sent] == [bytes(15) + b"\1", bytes([10, 1, 2, 3])]
    with pytest.raises(ValueError, match="client_host 'nope' is not an IP address"):
        ForwardingManager(channel, client_host="nope")


def test_every_forwarded_api_has_a_handler():
    fm = ForwardingManager(FakeChannel(lambda e: None))
    assert set(fm.forwarding_handlers()) == set(FORWARDED_APIS) == {
        int(ApiKeys[n]) for n in ("CREATE_TOPICS", "DELETE_TOPICS", "CREATE_PARTITIONS", "INCREMENTAL_ALTER_CONFIGS",
                                  "ALTER_CONFIGS", "ELECT_LEADERS", "ALTER_PARTITION_REASSIGNMENTS",
                                  "LIST_PARTITION_REASSIGNMENTS", "UPDATE_FEATURES")}
    for handler in fm.forwarding_handlers().values():
        assert asyncio.iscoroutinefunction(handler)


# ---------------------------------------------------------------------- failures
def _envelope_answer(code: int, data: bytes | None = None):
    return lambda envelope: EnvelopeResponse(response_data=data, error_code=code)


@pytest.mark.parametrize("answer, expected", [
    (ControllerUnavailableError("no controller answered CreateTopics within 30.0 s"), E.REQUEST_TIMED_OUT),
    (TimeoutError(), E.REQUEST_TIMED_OUT),
    (ConnectionResetError("reset"), E.REQUEST_TIMED_OUT),
    (UnsupportedControllerVersionError("no common Envelope version"), E.UNKNOWN_SERVER_ERROR),
    (RuntimeError("a bug"), E.UNKNOWN_SERVER_ERROR),
    (_envelope_answer(E.NOT_CONTROLLER), E.NOT_CONTROLLER),
    (_envelope_answer(E.INVALID_REQUEST), E.UNKNOWN_SERVER_ERROR),
    (_envelope_answer(E.PRINCIPAL_DESERIALIZATION_FAILURE), E.UNKNOWN_SERVER_ERROR),
    (_envelope_answer(0, None), E.UNKNOWN_SERVER_ERROR),
    (_envelope_answer(0, b"\0\0\0\x1f\0"), E.UNKNOWN_SERVER_ERROR),  # does not decode
], ids=["unavailable", "timeout", "reset", "version-mismatch", "bug", "not-controller", "invalid-request",
        "principal", "no-data", "garbage"])
def test_forwarding_failures_become_the_apis_error_response(answer, expected):
    fm = ForwardingManager(FakeChannel(answer))
    request = _create("a", "b")
    resp = asyncio.run(fm.forward(_client_ctx(request, 7), request))
    assert [(t.name, t.error_code, t.error_message) for t in resp.topics] == [("a", expected, None),
                                                                              ("b", expected, None)]
    DT = DeleteTopicsRequest
    for version, request in ((1, DT(topic_names=["x"], timeout_ms=1)),
                             (6, DT(topics=[DT.DeleteTopicState(name="x")], timeout_ms=1))):
        resp = asyncio.run(fm.forward(_client_ctx(request, version), request))
        assert [(t.name, t.error_code) for t in resp.responses] == [("x", expected)]


def test_answer_with_another_correlation_id_is_unknown_server_error():
    request = _create("a")

    def answer(envelope):  # the right body, the wrong correlation id
        body = _ok_create(None, request)
        return EnvelopeResponse(response_data=bytes(encode_response(body, 7, 32)[4:]), error_code=0)

    resp = asyncio.run(ForwardingManager(FakeChannel(answer)).forward(_client_ctx(request, 7), request))
    assert resp.topics[0].error_code == E.UNKNOWN_SERVER_ERROR


def test_unsupported_version_closes_the_clients_connection():
    fm = ForwardingManager(FakeChannel(_envelope_answer(E.UNSUPPORTED_VERSION)))
    request = _create("a")
    with pytest.raises(ForwardedVersionMismatch, match="CreateTopics v7"):
        asyncio.run(fm.forward(_client_ctx(request, 7), request))


# ---------------------------------------------------------------------- config writes
def _resource(rtype: int, name: str, *configs: tuple[str, str | None, int]):
    return IA.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=[
        IA.AlterableConfig(name=k, value=v, config_operation=op) for k, v, op in configs])


def test_config_writes_checked_on_the_broker_then_forwarded_and_reassembled():
    forwarded = []

    def route(ctx, body):
        forwarded.append([(r.resource_type, r.resource_name) for r in body.resources])
        R = IncrementalAlterConfigsResponse
        return R(throttle_time_ms=0, responses=[
            R.AlterConfigsResourceResponse(error_code=E.INVALID_CONFIG if r.resource_name == "bad" else 0,
                                           error_message="no" if r.resource_name == "bad" else None,
                                           resource_type=r.resource_type, resource_name=r.resource_name)
            for r in reversed(body.resources)])  # any order: matched by resource

    fm = ForwardingManager(_controller({int(ApiKeys.INCREMENTAL_ALTER_CONFIGS): route}), node_id=1)
    request = IA(resources=[
        _resource(TOPIC, "t1", ("retention.ms", "1", 0)),
        _resource(TOPIC, "dup", ("retention.ms", "1", 0)),
        _resource(BROKER, "1", ("log.cleaner.threads", "2", 0)),
        _resource(TOPIC, "dup", ("retention.ms", "2", 0)),
        _resource(TOPIC, "keys", ("a", "1", 0), ("a", "2", 0)),
        _resource(TOPIC, "nulls", ("a", None, 0), ("b", None, 1), ("c", None, 2)),
        _resource(BROKER, "2", ("x", "1", 0)),
        _resource(BROKER, "one", ("x", "1", 0)),
        _resource(BROKER, "", ("log.cleaner.threads", "2", 0)),
        _resource(BROKER_LOGGER, "1", ("kafka", "DEBUG", 0)),
        _resource(99, "x"),
        _resource(TOPIC, "bad", ("retention.ms", "x", 0)),
    ], validate_only=False)
    handler = fm.forwarding_handlers()[int(ApiKeys.INCREMENTAL_ALTER_CONFIGS)]
    resp = asyncio.run(handler(_client_ctx(request, 1), request))
    assert forwarded == [[(TOPIC, "t1"), (BROKER, "1"), (BROKER, ""), (TOPIC, "bad")]]
    invalid = E.INVALID_REQUEST
    assert [(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in resp.responses] == [
        (TOPIC, "t1", 0, None),
        (TOPIC, "dup", invalid, "Each resource must appear at most once."),
        (BROKER, "1", 0, None),
        (TOPIC, "dup", invalid, "Each resource must appear at most once."),
        (TOPIC, "keys", invalid, "Error due to duplicate config keys"),
        (TOPIC, "nulls", invalid, "Null value not supported for : a, c"),  # DELETE (1) may be null
        (BROKER, "2", invalid, "Unexpected broker id, expected 1, but received 2"),
        (BROKER, "one", invalid, "Node id must be an integer, but it is: one"),
        (BROKER, "", 0, None),
        (BROKER_LOGGER, "1", invalid,
         "BROKER_LOGGER configs are not supported by kraft yet (Kafka changes the broker's log levels)"),
        (99, "x", invalid, "Unknown resource type 99"),
        (TOPIC, "bad", E.INVALID_CONFIG, "no"),
    ]


def test_config_writes_all_answered_on_the_broker_send_nothing():
    channel = FakeChannel(RuntimeError("must not be called"))
    fm = ForwardingManager(channel, node_id=1)
    request = IA(resources=[_resource(BROKER, "7", ("x", "1", 0))], validate_only=False)
    resp = asyncio.run(fm.forwarding_handlers()[int(ApiKeys.INCREMENTAL_ALTER_CONFIGS)](_client_ctx(request, 1),
                                                                                          request))
    assert channel.sent == [] and resp.responses[0].error_code == E.INVALID_REQUEST


def test_config_write_missing_from_the_controllers_answer(caplog):
    def route(ctx, body):
        return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[])

    fm = ForwardingManager(_controller({int(ApiKeys.INCREMENTAL_ALTER_CONFIGS): route}))
    request = IA(resources=[_resource(TOPIC, "t", ("a", "1", 0))], validate_only=False)
    with caplog.at_level(logging.ERROR, "kraft.broker.forwarding"):
        resp = asyncio.run(fm.forwarding_handlers()[int(ApiKeys.INCREMENTAL_ALTER_CONFIGS)](
            _client_ctx(request, 1), request))
    assert resp.responses[0].error_code == E.UNKNOWN_SERVER_ERROR
    assert "fewer results than expected" in caplog.text


def test_config_writes_forwarding_failure_answers_the_forwarded_resources():
    fm = ForwardingManager(FakeChannel(ControllerUnavailableError("none")), node_id=1)
    request = IA(resources=[_resource(TOPIC, "t", ("a", "1", 0)), _resource(BROKER, "3")], validate_only=False)
    resp = asyncio.run(fm.forwarding_handlers()[int(ApiKeys.INCREMENTAL_ALTER_CONFIGS)](_client_ctx(request, 0),
                                                                                          request))
    assert [r.error_code for r in resp.responses] == [E.REQUEST_TIMED_OUT, E.INVALID_REQUEST]


# ---------------------------------------------------------------------- auto-creation
def test_auto_create_topics_fire_and_forget_once_per_topic():
    created = []
    gate = asyncio.Event

    async def go():
        release = gate()

        async def slow_send(body, version=None, *, timeout_s=None, restamp=None):
            await release.wait()
            return channel.answer(body)

        channel = _controller({int(ApiKeys.CREATE_TOPICS): lambda ctx, body: created.append(
            [(t.name, t.num_partitions, t.replication_factor) for t in body.topics]) or _ok_create(ctx, body)})
        channel.send = slow_send
        fm = ForwardingManager(channel)
        fm.auto_create_topics(["b", "a"], 3, 2)
        fm.auto_create_topics(["a", "c"], 3, 2)  # a is already being created
        assert fm.auto_creating == {"a", "b", "c"}
        release.set()
        for _ in range(100):
            if not fm.auto_creating:
                break
            await asyncio.sleep(0.01)
        assert fm.auto_creating == frozenset()
        await fm.close()

    asyncio.run(asyncio.wait_for(go(), 10))
    assert sorted(created) == [[("a", 3, 2), ("b", 3, 2)], [("c", 3, 2)]]


# ---------------------------------------------------------------------- over TCP


async def _unfence(conn, cluster_id: str, broker_id: int) -> None:
    reg = await conn.request(broker_registration(broker_id, cluster_id), 4, timeout=5)
    assert reg.error_code == 0
    deadline = time.monotonic() + 10
    while True:
        hb = await conn.request(broker_heartbeat(broker_id, reg.broker_epoch, reg.broker_epoch), 1, timeout=5)
        if hb.error_code == 0 and not hb.is_fenced:
            return
        assert time.monotonic() < deadline, "the broker stayed fenced"
        await asyncio.sleep(0.02)


def test_admin_writes_through_a_broker_listener_to_a_real_controller(tmp_path):
    (path,) = cluster_properties(str(tmp_path), 1)
    cfg = NodeConfig.from_file(path)

    async def go():
        node = KraftNode.from_config(cfg, controller=True)
        if int(ApiKeys.ENVELOPE) not in node.routes:  # the node registers it on controllers
            node.register({int(ApiKeys.ENVELOPE): envelope_handler(node.routes)})
        await node.start()
        channel = ControllerChannel(node._active_controller_address, client_id="broker-0-forwarding")
        fm = ForwardingManager(channel, node_id=0)
        broker = KafkaServer("127.0.0.1", 0, fm.forwarding_handlers(), listener="PLAINTEXT", listener_type="broker")
        port = await broker.start()
        try:
            await until_controller_active(node)
            ctl = node.controller.controller
            rc = ctl.replication_control
            admin = await KafkaConnection.open("127.0.0.1", node.port, timeout=5)
            await _unfence(admin, ctl.cluster_id, 0)
            await admin.close()
            client = await KafkaConnection.open("127.0.0.1", port, timeout=5)
            try:
                for version, name in ((7, "new"), (2, "old")):
                    started = time.perf_counter()
                    r = await client.request(_create(name, partitions=2), version, timeout=15)
                    elapsed_ms = (time.perf_counter() - started) * 1000
                    assert [(t.name, t.error_code) for t in r.topics] == [(name, 0)], r
                    committed = ctl.committed_epoch()
                    topic_id = rc.topic_id(name, epoch=committed)  # committed when the client is answered
                    assert topic_id is not None and sorted(rc.partitions(topic_id, epoch=committed)) == [0, 1]
                    logging.getLogger(__name__).info("forwarded CreateTopics v%d: %.1f ms", version, elapsed_ms)
                r = await client.request(_create("new"), 7, timeout=15)
                assert (r.topics[0].error_code, r.topics[0].error_message) == (
                    E.TOPIC_ALREADY_EXISTS, "Topic 'new' already exists.")

                CP = CreatePartitionsRequest
                r = await client.request(CP(topics=[CP.CreatePartitionsTopic(name="new", count=4, assignments=None)],
                                            timeout_ms=5000, validate_only=False), 3, timeout=15)
                assert (r.results[0].name, r.results[0].error_code) == ("new", 0)
                assert sorted(rc.partitions(rc.topic_id("new"), epoch=ctl.committed_epoch())) == [0, 1, 2, 3]

                r = await client.request(IA(resources=[_resource(TOPIC, "new", ("retention.ms", "1234", 0)),
                                                       _resource(BROKER, "5", ("x", "1", 0))],
                                            validate_only=False), 1, timeout=15)
                assert [(x.resource_name, x.error_code) for x in r.responses] == [("new", 0),
                                                                                   ("5", E.INVALID_REQUEST)]
                configs = ctl.configuration_control.configs(ConfigResource.topic("new"), epoch=ctl.committed_epoch())
                assert configs == {"retention.ms": "1234"}

                DT = DeleteTopicsRequest
                r = await client.request(DT(topic_names=["old"], timeout_ms=5000), 1, timeout=15)
                assert [(t.name, t.error_code) for t in r.responses] == [("old", 0)]
                r = await client.request(DT(topics=[DT.DeleteTopicState(name="new")], timeout_ms=5000), 6,
                                         timeout=15)
                assert [(t.name, t.error_code) for t in r.responses] == [("new", 0)]
                assert rc.topic_id("old", epoch=ctl.committed_epoch()) is None
                assert rc.topic_id("new", epoch=ctl.committed_epoch()) is None

                # auto-creation through the same channel
                fm.auto_create_topics(["auto"])
                deadline = time.monotonic() + 10
                while rc.topic_id("auto", epoch=ctl.committed_epoch()) is None:
                    assert time.monotonic() < deadline, "auto-creation did not happen"
                    await asyncio.sleep(0.02)
            finally:
                await client.close()
        finally:
            await broker.close()
            await fm.close()
            await channel.close()
            await node.close()

    asyncio.run(asyncio.wait_for(go(), 60))


def test_no_controller_answers_request_timed_out_over_tcp():
    async def go():
        channel = ControllerChannel(lambda: None, client_id="broker-0-forwarding", retry_backoff_ms=20,
                                    request_timeout_ms=300)
        fm = ForwardingManager(channel, node_id=0)
        broker = KafkaServer("127.0.0.1", 0, fm.forwarding_handlers(), listener="PLAINTEXT", listener_type="broker")
        port = await broker.start()
        client = await KafkaConnection.open("127.0.0.1", port, timeout=5)
        try:
            started = time.monotonic()
            r = await client.request(_create("x", "y"), 7, timeout=10)
            assert [(t.name, t.error_code) for t in r.topics] == [("x", E.REQUEST_TIMED_OUT),
                                                                  ("y", E.REQUEST_TIMED_OUT)]
            assert time.monotonic() - started < 5
            # the connection stays usable
            r = await client.request(DeleteTopicsRequest(topic_names=["x"], timeout_ms=100), 4, timeout=10)
            assert r.responses[0].error_code == E.REQUEST_TIMED_OUT
        finally:
            await client.close()
            await broker.close()
            await channel.close()

    asyncio.run(asyncio.wait_for(go(), 30))



def test_unsupported_version_from_the_controller_closes_the_client_connection_over_tcp():
    from kraft_node.network.client import ConnectionClosed

    async def go():
        fm = ForwardingManager(FakeChannel(_envelope_answer(E.UNSUPPORTED_VERSION)))
        broker = KafkaServer("127.0.0.1", 0, fm.forwarding_handlers(), listener="PLAINTEXT", listener_type="broker")
        port = await broker.start()
        client = await KafkaConnection.open("127.0.0.1", port, timeout=5)
        try:
            with pytest.raises(ConnectionClosed):
                await client.request(_create("x"), 7, timeout=5)
        finally:
            await client.close()
            await broker.close()

    asyncio.run(asyncio.wait_for(go(), 30))
