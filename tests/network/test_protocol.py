"""RPC framing, header versions, ApiVersions helpers, and cross-checks against kafka-python's codecs."""
from __future__ import annotations

import importlib
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.messages import message_strategy

from kraft_node.protocol import framing
from kraft_node.protocol.api_keys import (
    API_INFO,
    ApiKeys,
    answer_api_versions,
    request_header_version,
    response_header_version,
)
from kraft_node.protocol.generated.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kraft_node.protocol.generated.metadata import MetadataRequest
from kraft_node.protocol.headers import RequestHeader
from kraft_storage.messages.runtime import MessageError, Uuid

ALL_VERSIONS = [pytest.param(i, v, id=f"{i.name}-v{v}") for i in API_INFO.values()
                for v in range(i.lowest, i.highest + 1)]


@pytest.mark.parametrize("info,v", ALL_VERSIONS)
def test_request_and_response_frames(info, v):
    req = info.request()
    frame = framing.encode_request(req, v, correlation_id=77, client_id="kraft")
    size = int.from_bytes(frame[:4], "big")
    assert size == len(frame) - 4
    payload, rest = framing.split_frame(frame + b"\x00\x00")
    assert rest == b"\x00\x00"
    header, body = framing.decode_request(payload)
    assert (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id) == (
        info.key, v, 77, "kraft")
    assert body == req
    hv = request_header_version(info.key, v)
    assert hv == (2 if info.is_flexible(v) else 1)
    # header bytes: apiKey, version, correlation id, int16 client id (+ tagged section in v2)
    assert payload[:8] == int(info.key).to_bytes(2, "big") + v.to_bytes(2, "big") + (77).to_bytes(4, "big")
    assert payload[8:15] == b"\x00\x05kraft"
    assert (payload[15] == 0) if hv == 2 else True

    resp = info.response()
    rframe = framing.encode_response(resp, v, correlation_id=77)
    h, b = framing.decode_response(rframe[4:], info.key, v)
    assert h.correlation_id == 77 and b == resp
    rhv = response_header_version(info.key, v)
    assert rhv == (0 if info.key == ApiKeys.API_VERSIONS else (1 if info.is_flexible(v) else 0))
    assert len(rframe) - 4 == 4 + (1 if rhv == 1 else 0) + len(resp.write(v))


def test_api_versions_response_header_is_always_v0():
    frame = framing.encode_response(ApiVersionsResponse(), 4, correlation_id=1)
    assert frame[4:8] == b"\x00\x00\x00\x01" and frame[8:10] == b"\x00\x00"  # no tagged section after the id
    assert response_header_version(ApiKeys.API_VERSIONS, 4) == 0
    assert response_header_version(ApiKeys.METADATA, 9) == 1 and response_header_version(ApiKeys.METADATA, 8) == 0


def test_api_versions_answers():
    resp, v = answer_api_versions(ApiVersionsRequest(), 3, "controller")
    assert v == 3 and resp.error_code == 0
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert keys[ApiKeys.VOTE] == (0, 2) and keys[ApiKeys.API_VERSIONS] == (0, 4)
    assert all("controller" in API_INFO[k].listeners for k in keys)
    full, _ = answer_api_versions(None, 4)
    assert len(full.api_keys) == len(API_INFO)
    bad, v = answer_api_versions(None, 99)
    assert v == 0 and bad.error_code == 35 and [(k.api_key, k.max_version) for k in bad.api_keys] == [(18, 4)]
    ApiVersionsResponse.read(bad.write(0), 0)


def test_unsupported_requests_are_named():
    hdr = RequestHeader(request_api_key=3, request_api_version=99, correlation_id=5, client_id="c").write(2)
    with pytest.raises(framing.UnsupportedApiError, match="Metadata version 99") as info:
        framing.decode_request(hdr)
    assert info.value.header.correlation_id == 5
    hdr = RequestHeader(request_api_key=999, request_api_version=0, correlation_id=5, client_id="c").write(1)
    with pytest.raises(framing.UnsupportedApiError, match="api key 999"):
        framing.decode_request(hdr)
    with pytest.raises(MessageError):
        framing.split_frame(b"\xff\xff\xff\xff")
    assert framing.split_frame(b"\x00\x00\x00\x05ab") == (None, b"\x00\x00\x00\x05ab")
    frame = framing.encode_request(MetadataRequest(), 12, 1)
    with pytest.raises(MessageError):
        framing.decode_request(frame[4:-1])
    # Bytes after the last field are ignored, as Kafka's RequestContext.parseRequest ignores them
    # (librdkafka 2.16 sends its all-topics Metadata v12/v13 with 3 of them: issue 24).
    for version in (12, 13):
        frame = framing.encode_request(MetadataRequest(topics=None), version, 7)
        header, body = framing.decode_request(frame[4:] + b"\x00\x00\x00")
        assert header.correlation_id == 7 and body == framing.decode_request(frame[4:])[1]
        assert body.topics is None
    # ... but a body cut short is still refused
    with pytest.raises(MessageError):
        framing.decode_request(frame[4:-1])


# ---------------------------------------------------------------- kafka-python cross-check

kp_metadata = importlib.import_module("kafka.protocol.metadata")
kp_admin = importlib.import_module("kafka.protocol.admin")

KP = {
    ApiKeys.API_VERSIONS: (kp_metadata.ApiVersionsRequest, kp_metadata.ApiVersionsResponse),
    ApiKeys.METADATA: (kp_metadata.MetadataRequest, kp_metadata.MetadataResponse),
}
for _key, _name in [(ApiKeys.CREATE_TOPICS, "CreateTopics"), (ApiKeys.DELETE_TOPICS, "DeleteTopics"),
                    (ApiKeys.DESCRIBE_CLUSTER, "DescribeCluster"), (ApiKeys.DESCRIBE_CONFIGS, "DescribeConfigs"),
                    (ApiKeys.CREATE_PARTITIONS, "CreatePartitions"), (ApiKeys.ELECT_LEADERS, "ElectLeaders"),
                    (ApiKeys.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs"),
                    (ApiKeys.ALTER_PARTITION_REASSIGNMENTS, "AlterPartitionReassignments"),
                    (ApiKeys.LIST_PARTITION_REASSIGNMENTS, "ListPartitionReassignments"),
                    (ApiKeys.DESCRIBE_QUORUM, "DescribeQuorum"), (ApiKeys.UPDATE_FEATURES, "UpdateFeatures")]:
    KP[_key] = (getattr(kp_admin, _name + "Request"), getattr(kp_admin, _name + "Response"))


def _kp_fields(kp_cls):
    return list(kp_cls._struct.fields.values())


def _paired(cls, kp_cls):
    """Pairs (our _JSON row, kafka-python field) matched by schema name (kafka-python keeps
    some fields Kafka 4 dropped, and renames AuthorizedOperations fields to bitfields)."""
    theirs = {f._json["name"].lower(): f for f in _kp_fields(kp_cls)}
    for row in cls._JSON:
        f = theirs.get(row[1].lower())
        if f is not None and f._json["type"] != "bitfield":
            yield row, f


def _to_kp(obj, kp_cls, version):
    """Build kafka-python's object from ours."""
    kw = {}
    for (attr, _name, kind, _lo, _hi, _scls, *_), f in _paired(type(obj), kp_cls):
        v = getattr(obj, attr)
        if kind == "struct" and v is not None:
            v = _to_kp(v, f.data_class, version)
        elif kind == "[]struct" and v is not None:
            v = [_to_kp(e, f.data_class, version) for e in v]
        elif kind == "uuid":
            v = uuid.UUID(bytes=v.bytes)
        elif kind == "[]uuid":
            v = [uuid.UUID(bytes=e.bytes) for e in v]
        kw[f.name] = v
    return kp_cls(**kw)


def _from_kp(kp_obj, cls, kp_cls, version):
    """Inverse of _to_kp for the fields present in ``version``."""
    obj = cls()
    for (attr, _name, kind, lo, hi, scls, *_), f in _paired(cls, kp_cls):
        if not (lo <= version and (hi is None or version <= hi)):
            continue
        v = getattr(kp_obj, f.name)
        if kind == "struct" and v is not None:
            v = _from_kp(v, scls, f.data_class, version)
        elif kind == "[]struct" and v is not None:
            v = [_from_kp(e, scls, f.data_class, version) for e in v]
        elif kind == "uuid":
            v = Uuid(v.bytes)
        elif kind == "[]uuid":
            v = [Uuid(e.bytes) for e in v]
        elif kind == "bytes" and v is not None:
            v = bytes(v)
        setattr(obj, attr, v)
    return obj


def _default_bitfields(obj):
    for attr, name, kind, _lo, _hi, _scls, *_ in obj._JSON:
        if "AuthorizedOperations" in name and kind == "int32":
            setattr(obj, attr, type(obj)().__getattribute__(attr))
        v = getattr(obj, attr)
        if kind == "struct" and v is not None:
            _default_bitfields(v)
        elif kind == "[]struct" and v:
            for e in v:
                _default_bitfields(e)
    obj.unknown_tagged_fields = ()
    return obj


CROSS = [pytest.param(cls, kpc, v, id=f"{cls.NAME}-v{v}")
         for key, pair in KP.items()
         for cls, kpc in zip((API_INFO[key].request, API_INFO[key].response), pair)
         for v in range(max(API_INFO[key].lowest, kpc.min_version), min(API_INFO[key].highest, kpc.max_version) + 1)]


def test_cross_check_covers_the_named_apis():
    names = {p.values[0].NAME for p in CROSS}
    for n in ("ApiVersionsRequest", "ApiVersionsResponse", "MetadataRequest", "MetadataResponse",
              "CreateTopicsRequest", "CreateTopicsResponse", "DescribeClusterRequest", "DescribeClusterResponse"):
        assert n in names
    assert len(CROSS) > 80


@pytest.mark.parametrize("cls,kp_cls,v", CROSS)
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_encodings_match_kafka_python(cls, kp_cls, v, data):
    obj = _default_bitfields(data.draw(message_strategy(cls, v, False)))
    ours = obj.write(v)
    kp_obj = _to_kp(obj, kp_cls, v)
    theirs = kp_obj.encode(version=v)
    assert bytes(theirs) == ours
    # and in the other direction: kafka-python's bytes decode to our object, which re-encodes the same
    back = cls.read(bytes(theirs), v)
    assert back.write(v) == ours
    if not (cls is ApiVersionsResponse and obj.error_code != 0):  # kafka-python re-reads errors as v0 (KIP-511)
        assert _from_kp(kp_cls.decode(ours, version=v), cls, kp_cls, v) == obj
