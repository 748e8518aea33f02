"""Malformed input gets a clear MessageError (what, where), never another exception or a crash.

Run against both implementations of the metadata codecs (the native one reads
raw memory, so every bounds check matters).
"""
from __future__ import annotations

import pytest
from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.messages import fixture_records

import kraft_storage._pure._messages_metadata as pure_md
from kraft_storage import accel
from kraft_storage.messages import control, dump
from kraft_storage.messages.runtime import MessageError

IMPLS = [pure_md]
if accel.native_available("_messages_metadata"):
    import kraft_storage._native._messages_metadata as native_md
    IMPLS.append(native_md)
IDS = [m.__name__.split(".")[1] for m in IMPLS]


def sample_values():
    if not FIXTURES.is_dir():
        return []
    seen = {}
    for _path, _offset, is_control, _key, value in fixture_records():
        if not is_control:
            seen.setdefault((value[1], value[2]), value)  # one per (apiKey, version)
    return list(seen.values())


SAMPLES = sample_values()


@pytest.mark.usefixtures("fixtures_dir")  # fails, never skips, without the fixtures
@pytest.mark.parametrize("impl", IMPLS, ids=IDS)
def test_every_truncation_is_a_message_error(impl):
    for value in SAMPLES:
        for cut in range(len(value)):
            with pytest.raises(MessageError) as info:
                impl.decode_metadata_record(value[:cut], 42)
            assert info.value.offset == 42


@pytest.mark.usefixtures("fixtures_dir")  # fails, never skips, without the fixtures
@pytest.mark.parametrize("impl", IMPLS, ids=IDS)
def test_trailing_bytes_are_refused(impl):
    for value in SAMPLES:
        with pytest.raises(MessageError, match="trailing"):
            impl.decode_metadata_record(value + b"\x00")


@pytest.mark.usefixtures("fixtures_dir")  # fails, never skips, without the fixtures
@pytest.mark.parametrize("impl", IMPLS, ids=IDS)
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_corrupted_values_decode_or_raise_message_error(impl, data):
    value = bytearray(data.draw(st.sampled_from(SAMPLES)))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(value) - 1))
        value[i] = data.draw(st.integers(0, 255))
    try:
        api_key, version, msg = impl.decode_metadata_record(bytes(value))
    except MessageError:
        return
    msg.to_dict(version)  # a decoded record is a usable object


@pytest.mark.parametrize("impl", IMPLS, ids=IDS)
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=st.binary(max_size=40))
def test_random_bytes_never_crash(impl, value):
    try:
        impl.decode_metadata_record(value)
    except MessageError:
        pass


@pytest.mark.parametrize("impl", IMPLS, ids=IDS)
def test_specific_malformations(impl):
    d = impl.decode_metadata_record
    with pytest.raises(MessageError, match=r"unknown metadata record type: apiKey 99.*offset 1234"):
        d(b"\x01\x63\x00\x00", 1234)
    with pytest.raises(MessageError, match=r"unsupported PartitionRecord \(apiKey 3\) version 9.*offset 7"):
        d(b"\x01\x03\x09\x00", 7)
    with pytest.raises(MessageError, match="frame version 2"):
        d(b"\x02\x14\x00\x00")
    with pytest.raises(MessageError, match="varint"):
        d(b"\x01\x14\x00\xff\xff\xff\xff\xff\x01")  # tag count varint longer than 5 bytes
    # NoOpRecord with two tagged fields out of order: tag 5 then tag 3
    with pytest.raises(MessageError, match="out of order"):
        d(b"\x01\x14\x00\x02\x05\x00\x03\x00")
    with pytest.raises(MessageError, match="out of order"):
        d(b"\x01\x14\x00\x02\x05\x00\x05\x00")  # duplicate
    # a tagged field whose size runs past the end
    with pytest.raises(MessageError, match="exceeds"):
        d(b"\x01\x14\x00\x01\x05\x09\x00")
    # TopicRecord: name length 100 (compact 101) beyond the buffer
    with pytest.raises(MessageError, match=r"string length 100 exceeds.*TopicRecord\.Name"):
        d(b"\x01\x02\x00\x65abc")
    # PartitionRecord v0 with a replica array claiming 1000 elements
    body = b"\x00\x00\x00\x00" + bytes(16) + b"\xe9\x07" + b"\x00" * 8
    with pytest.raises(MessageError, match=r"array length 1000 exceeds.*PartitionRecord\.Replicas"):
        d(b"\x01\x03\x00" + body)
    # invalid UTF-8 in a string
    with pytest.raises(MessageError, match="UTF-8"):
        d(b"\x01\x02\x00\x03\xff\xfe" + bytes(16) + b"\x00")
    # a known tagged field whose value is shorter than its declared size
    with pytest.raises(MessageError, match="does not fill"):
        d(b"\x01\x03\x00" + b"\x00\x00\x00\x00" + bytes(16) + b"\x01\x01\x01\x01" + b"\xff" * 12
          + b"\x01\x00\x02\x01\x00")
    # nested path: RegisterBrokerRecord endpoint truncated inside its struct
    with pytest.raises(MessageError, match=r"RegisterBrokerRecord\.EndPoints -> BrokerEndpoint\.") as info:
        d(b"\x01\x00\x00" + b"\x00\x00\x00\x01" + bytes(16) + bytes(8) + b"\x02\x02a")
    assert info.value.position >= 0


def test_dump_helpers_raise_message_error_on_garbage():
    with pytest.raises(MessageError):
        dump.metadata_json(b"\x01")
    with pytest.raises(MessageError):
        dump.metadata_json(None)
    with pytest.raises(MessageError, match="unknown control record type 9"):
        dump.control_json(b"\x00\x00\x00\x09", b"")
    with pytest.raises(MessageError, match="4 needed"):
        dump.control_json(b"\x00", b"")
    with pytest.raises(MessageError, match="LEADER_CHANGE"):
        dump.control_json(b"\x00\x00\x00\x02", b"\x00\x00\x00")
    assert dump.control_json(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05") == {
        "type": "COMMIT", "data": {"Version": 0, "CoordinatorEpoch": 5}}
    with pytest.raises(MessageError):
        control.decode_control_record(b"\x00\x00\x00\x00", b"\x00\x00\x00")
