"""framing's lean BrokerHeartbeat decoder (one ``unpack_from`` for the common shape) must give
exactly what the generated codec gives, and hand every other shape to the codec."""
from __future__ import annotations

import random

import pytest

from kraft_node.protocol import framing
from kraft_node.protocol.framing import decode_request, encode_request
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest
from kraft_node.protocol.headers import RequestHeader
from kraft_storage.messages.runtime import MessageError, Uuid


def _codec(payload: bytes, version: int):
    header, pos = RequestHeader.read_prefix(payload, 0, 2)
    body, _ = BrokerHeartbeatRequest.read_prefix(payload, pos, version)
    return header, body


def _same(a, b) -> bool:
    return type(a) is type(b) and all(getattr(a, f) == getattr(b, f) for f in type(b).__slots__)


@pytest.mark.parametrize("version", [0, 1])
def test_random_heartbeats_decode_as_the_codec_does(version):
    rng = random.Random(version)
    for i in range(500):
        req = BrokerHeartbeatRequest(
            broker_id=rng.choice([0, 1, -1, 2**31 - 1, -2**31, rng.randint(-2**31, 2**31 - 1)]),
            broker_epoch=rng.choice([-1, 0, 2**63 - 1, -2**63, rng.randint(-2**63, 2**63 - 1)]),
            current_metadata_offset=rng.randint(-2**63, 2**63 - 1),
            want_fence=rng.random() < 0.5, want_shut_down=rng.random() < 0.5)
        payload = bytes(encode_request(req, version, i, rng.choice(["", "bench", None, "broker-7"]))[4:])
        header, body = decode_request(payload)
        want_header, want_body = _codec(payload, version)
        assert header == want_header
        assert _same(body, want_body) and body == want_body
        assert body.offline_log_dirs == [] and body.unknown_tagged_fields == ()


def test_the_lean_path_takes_only_the_common_shape():
    req = BrokerHeartbeatRequest(broker_id=3, broker_epoch=9, current_metadata_offset=12)
    payload = bytes(encode_request(req, 1, 5, "c")[4:])
    header, pos = RequestHeader.read_prefix(payload, 0, 2)
    assert framing._lean_broker_heartbeat(payload, pos) is not None
    # tagged fields (OfflineLogDirs), trailing bytes or a short body: None, the codec decides
    dirs = BrokerHeartbeatRequest(broker_id=3, broker_epoch=9, current_metadata_offset=12,
                                  offline_log_dirs=[Uuid.random()])
    tagged = bytes(encode_request(dirs, 1, 5, "c")[4:])
    assert framing._lean_broker_heartbeat(tagged, pos) is None
    assert framing._lean_broker_heartbeat(payload + b"\x00", pos) is None
    assert framing._lean_broker_heartbeat(payload[:-1], pos) is None


def test_other_shapes_decode_through_the_codec_with_its_results_and_errors():
    dirs = [Uuid.random(), Uuid.random()]
    req = BrokerHeartbeatRequest(broker_id=3, broker_epoch=9, current_metadata_offset=12, offline_log_dirs=dirs)
    payload = bytes(encode_request(req, 1, 5, "c")[4:])
    _, body = decode_request(payload)
    assert body.offline_log_dirs == dirs
    # trailing bytes are ignored, as for every request (the codec path logs them)
    _, body = decode_request(payload + b"\x01\x02")
    assert body.offline_log_dirs == dirs
    plain = bytes(encode_request(BrokerHeartbeatRequest(broker_id=1, broker_epoch=2), 1, 5, "c")[4:])
    assert decode_request(plain + b"\x07")[1] == decode_request(plain)[1]
    # a truncated body is the codec's MessageError, naming the field
    with pytest.raises(MessageError, match="BrokerHeartbeatRequest"):
        decode_request(plain[:-3])


def test_any_non_zero_flag_byte_is_true_on_both_paths():
    req = BrokerHeartbeatRequest(broker_id=1, broker_epoch=2, current_metadata_offset=3)
    payload = bytearray(encode_request(req, 1, 5, "c")[4:])
    payload[-3] = 2   # WantFence
    payload[-2] = 0xFF  # WantShutDown
    _, body = decode_request(bytes(payload))
    _, want = _codec(bytes(payload), 1)
    assert body.want_fence is True and body.want_shut_down is True and _same(body, want)
