"""The Cython builds of the generated RPC codecs (kraft_node._native._rpc_*) against
their pure twins (kraft_node._pure._rpc_*): same bytes out, same objects in, same
errors -- including the C-level Writer's fallback to the pure Writer for values
its fast path does not take."""
from __future__ import annotations

import importlib
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_storage.accel import native_available
from kraft_storage.messages.runtime import MessageError, Uuid
from kraft_storage.messages.runtime import Writer as PyWriter

NATIVE = [m for m in ("_rpc_fetch", "_rpc_headers") if native_available(m, package="kraft_node")]
_needs_native = pytest.mark.skipif(len(NATIVE) < 2, reason="kraft_node native codecs not built")


def _mods(name):
    return (importlib.import_module(f"kraft_node._pure.{name}"),
            importlib.import_module(f"kraft_node._native.{name}"))


def _fetch_request(mod, *, offset=100, epoch=3, hwm=2 ** 63 - 1, cluster="MkU3OEVBNTcwNTJENDM2Qg"):
    R = mod.FetchRequest
    part = R.FetchPartition(partition=0, current_leader_epoch=epoch, fetch_offset=offset,
                            last_fetched_epoch=epoch, log_start_offset=0, partition_max_bytes=1 << 20,
                            replica_directory_id=Uuid(uuid.UUID(int=12345).bytes), high_watermark=hwm)
    return R(cluster_id=cluster, replica_state=R.ReplicaState(replica_id=2, replica_epoch=-1),
             max_wait_ms=500, min_bytes=0, max_bytes=0x7FFFFFFF,
             topics=[R.FetchTopic(topic_id=Uuid(bytes(15) + b"\x01"), partitions=[part])])


def _fetch_response(mod, records=b"x" * 77, hwm=100, div=None):
    R = mod.FetchResponse
    part = R.PartitionData(partition_index=0, error_code=0, high_watermark=hwm, log_start_offset=0,
                           diverging_epoch=R.EpochEndOffset(epoch=div[0], end_offset=div[1]) if div
                           else R.EpochEndOffset(),
                           current_leader=R.LeaderIdAndEpoch(leader_id=1, leader_epoch=3),
                           snapshot_id=R.SnapshotId(), records=records)
    return R(error_code=0, responses=[R.FetchableTopicResponse(topic="", topic_id=Uuid(bytes(15) + b"\x01"),
                                                               partitions=[part])],
             node_endpoints=[R.NodeEndpoint(node_id=1, host="127.0.0.1", port=9093)])


@_needs_native
@pytest.mark.parametrize("kind,version", [("request", 15), ("request", 16), ("request", 17),
                                          ("response", 12), ("response", 13), ("response", 15),
                                          ("response", 16), ("response", 17)])
def test_fetch_twins_write_and_read_the_same_bytes(kind, version):
    pure, native = _mods("_rpc_fetch")
    if kind == "request":
        p, n = _fetch_request(pure), _fetch_request(native)
    else:
        p, n = _fetch_response(pure, div=(2, 50)), _fetch_response(native, div=(2, 50))
        if version < 16:
            p.node_endpoints, n.node_endpoints = [], []
        if version < 13:
            for o in (p, n):
                o.responses[0].topic = "__cluster_metadata"
    data = p.write(version)
    assert n.write(version) == data
    # each twin reads the other's bytes into an equal message
    assert type(p).read(data, version).to_dict(version) == type(n).read(data, version).to_dict(version)
    # a native message written into a pure Writer's buffer (the framing's) lands in that buffer
    w = PyWriter()
    w.out += b"\x00\x01"
    n._write(w, version)
    assert bytes(w.out) == b"\x00\x01" + data


@_needs_native
@pytest.mark.parametrize("bad", [
    ("log_start_offset", 2 ** 63), ("log_start_offset", "7"), ("fetch_offset", 1.5),
    ("partition", 2 ** 31), ("partition", -2 ** 31 - 1), ("current_leader_epoch", None),
])
def test_fetch_twins_refuse_bad_values_alike(bad):
    pure, native = _mods("_rpc_fetch")
    field, value = bad
    errs = []
    for mod in (pure, native):
        req = _fetch_request(mod)
        setattr(req.topics[0].partitions[0], field, value)
        with pytest.raises(MessageError) as ei:
            req.write(17)
        errs.append(str(ei.value))
    assert errs[0] == errs[1]


@_needs_native
def test_fetch_twins_reject_truncated_input_alike():
    pure, native = _mods("_rpc_fetch")
    data = _fetch_response(pure).write(17)
    for cut in range(len(data)):
        errs = []
        for mod in (pure, native):
            with pytest.raises(MessageError) as ei:
                mod.FetchResponse.read(data[:cut], 17)
            errs.append((str(ei.value), ei.value.position))
        assert errs[0] == errs[1], cut


@_needs_native
def test_headers_twins():
    pure, native = _mods("_rpc_headers")
    for hv in (1, 2):
        p = pure.RequestHeader(request_api_key=1, request_api_version=17, correlation_id=-5,
                               client_id="raft-client-2")
        n = native.RequestHeader(request_api_key=1, request_api_version=17, correlation_id=-5,
                                 client_id="raft-client-2")
        data = p.write(hv)
        assert n.write(hv) == data
        (hp, ep), (hn, en) = (pure.RequestHeader.read_prefix(data + b"rest", 0, hv),
                              native.RequestHeader.read_prefix(data + b"rest", 0, hv))
        assert ep == en == len(data) and hp.to_dict(hv) == hn.to_dict(hv)


_PRIMS = ["int8", "int16", "uint16", "int32", "uint32", "int64"]


@_needs_native
@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_PRIMS + ["uvarint", "boolean", "compact_string", "compact_bytes",
                                                   "compact_array_len", "string", "bytes_", "array_len"]),
                          st.one_of(st.integers(min_value=-2 ** 70, max_value=2 ** 70), st.booleans(), st.none(),
                                    st.text(max_size=20), st.binary(max_size=20),
                                    st.lists(st.integers(), max_size=3), st.floats(allow_nan=False))),
                min_size=1, max_size=12))
def test_native_writer_matches_pure_writer(ops):
    """Every primitive, valid or not: same bytes, or the same exception type and text."""
    NW = importlib.import_module("kraft_node._native._rpc_fetch").Writer  # the C-level Writer
    pw, nw = PyWriter(), NW()
    for name, value in ops:
        results = []
        for w in (pw, nw):
            try:
                getattr(w, name)(value)
                results.append(None)
            except Exception as exc:  # noqa: BLE001 - comparing the twins' failures
                results.append((type(exc).__name__, str(exc)))
        assert results[0] == results[1], (name, value)
        assert bytes(pw.out) == bytes(nw.out), (name, value)



@pytest.mark.parametrize("size", [0, 100, 4095, 4096, 300_000])
def test_framed_response_in_chunks_leaves_large_records_uncopied(size):
    """encode_response(chunks=True): the buffers join to exactly the one-buffer frame, and
    records of at least SPILL_MIN_BYTES travel as the very object given (no copy).  Runs
    with the implementation this process uses (CI runs the suite native and pure)."""
    from kraft_node.protocol import framing
    from kraft_node.protocol.generated import fetch as g_fetch
    from kraft_storage.messages.runtime import SPILL_MIN_BYTES
    records = bytes(range(256)) * (size // 256) + b"r" * (size % 256)
    resp = _fetch_response(g_fetch._impl, records=records)
    whole = bytes(framing.encode_response(resp, 17, 42))
    parts = framing.encode_response(resp, 17, 42, chunks=True)
    assert b"".join(bytes(p) for p in parts) == whole
    assert int.from_bytes(whole[:4], "big") == len(whole) - 4
    spilled = [p for p in parts if p is records]
    assert len(spilled) == (1 if size >= SPILL_MIN_BYTES else 0)
