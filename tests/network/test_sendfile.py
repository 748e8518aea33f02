"""Zero-copy answers (issue 25, Fetch): a FileRegion part of an answer goes out by sendfile.

Checked on both event loops: the frame is byte-identical to the copied one (and to TLS's,
which copies); answers pipelined behind a region still blocked on a full socket keep their
order; a region truncated under a pending send closes the connection before the frame ends
(never a corrupt frame) and the server keeps serving; a client that goes away mid-region
leaves no connection and no descriptor behind.

The slow client: a socket with a small receive buffer that reads nothing for a while, so the
server's sendfile meets a full socket and waits for it to drain.
"""
from __future__ import annotations

import asyncio
import os
import socket
import struct

import pytest
from support.pki import Pki

from kraft_node.broker.partition_apis import _file_region
from kraft_node.network import KafkaServer
from kraft_node.network.frames import FileRegion
from kraft_node.network.tls import client_context, server_context
from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.framing import decode_response, encode_request
from kraft_node.protocol.generated.api_versions import ApiVersionsRequest
from kraft_node.protocol.generated.fetch import FetchRequest, FetchResponse
from kraft_storage.log.log import KafkaLog
from kraft_storage.record.builder import build_batches

try:
    import uvloop  # noqa: F401
    LOOPS = ["asyncio", "uvloop"]
except ImportError:
    LOOPS = ["asyncio"]

FETCH_VERSION = 12
BIG = 4 << 20  # larger than any socket buffer here: the send blocks


def run(coro, loop: str, timeout: float = 60):
    if loop == "uvloop":
        import uvloop
        return uvloop.run(asyncio.wait_for(coro, timeout))
    return asyncio.run(asyncio.wait_for(coro, timeout))


def _fetch_request() -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 30, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[], forgotten_topics_data=[], rack_id="")


def _answer(records_by_partition: list) -> FetchResponse:
    parts = [FetchResponse.PartitionData(partition_index=i, error_code=0, high_watermark=7, last_stable_offset=7,
                                         log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
                                         records=r)
             for i, r in enumerate(records_by_partition)]
    topic = FetchResponse.FetchableTopicResponse(topic="t", partitions=parts)
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[topic], node_endpoints=[])


def _data_file(tmp_path, name: str, size: int) -> tuple[int, bytes]:
    data = os.urandom(size)
    path = os.path.join(str(tmp_path), name)
    with open(path, "wb") as f:
        f.write(data)
    return os.open(path, os.O_RDONLY), data


def _slow_socket() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.setblocking(False)
    return s


async def _connect(port: int, *, slow: bool = False, ssl=None):
    if slow:
        # a client that does not read (its transport paused until the test resumes it) behind a
        # 4 KiB receive buffer: the server's region must wait for the socket, whatever the
        # machine's load (a reading client could drain 4 MiB as fast as it is sent)
        sock = _slow_socket()
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 24)
        writer.transport.pause_reading()
        return reader, writer
    return await asyncio.open_connection("127.0.0.1", port, ssl=ssl, limit=1 << 24,
                                         server_hostname="127.0.0.1" if ssl else None)


async def _read_frame(reader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return struct.pack(">i", size) + await reader.readexactly(size)


def _regions_handler(regions: list, seen: list | None = None):
    def handle(ctx, req):
        if seen is not None:
            seen.append(ctx.zero_copy)
        return _answer([r() if callable(r) else r for r in regions])
    return handle


async def _wait_for(cond, what: str, timeout: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("loop", LOOPS)
def test_region_frames_equal_the_copied_frames(tmp_path, loop):
    fd, data = _data_file(tmp_path, "seg", 300_000)
    try:
        regions = [lambda: FileRegion(fd, 1000, 200_000), b"small records", lambda: FileRegion(fd, 5, 6000)]

        async def main():
            frames = []
            for zero_copy in (True, False):
                seen: list = []
                s = KafkaServer("127.0.0.1", 0, {ApiKeys.FETCH: _regions_handler(regions, seen)},
                                listener_type="broker", zero_copy=zero_copy)
                await s.start()
                try:
                    reader, writer = await _connect(s.port)
                    writer.write(encode_request(_fetch_request(), FETCH_VERSION, 42, "t"))
                    frames.append(await _read_frame(reader))
                    writer.close()
                finally:
                    await s.close()
                assert seen == [zero_copy]
            assert frames[0] == frames[1]
            _h, body = decode_response(frames[0][4:], ApiKeys.FETCH, FETCH_VERSION)
            got = [bytes(p.records) for p in body.responses[0].partitions]
            assert got == [data[1000:201_000], b"small records", data[5:6005]]

        run(main(), loop)
    finally:
        os.close(fd)


@pytest.mark.parametrize("loop", LOOPS)
def test_pipelined_answers_wait_behind_a_blocked_region_in_order(tmp_path, loop):
    fd, data = _data_file(tmp_path, "seg", BIG)
    try:
        async def main():
            s = KafkaServer("127.0.0.1", 0, {ApiKeys.FETCH: _regions_handler([lambda: FileRegion(fd, 0, BIG)])},
                            listener_type="broker")
            await s.start()
            try:
                reader, writer = await _connect(s.port, slow=True)
                # fetch, ApiVersions, fetch, ApiVersions...: all sent at once
                for cid in range(6):
                    if cid % 2 == 0:
                        writer.write(encode_request(_fetch_request(), FETCH_VERSION, cid, "t"))
                    else:
                        writer.write(encode_request(ApiVersionsRequest(client_software_name="t",
                                                                       client_software_version="1"), 3, cid, "t"))
                await writer.drain()
                conn = await _wait_conn(s)
                await _wait_for(lambda: conn._wfd >= 0, "the region never waited for the socket")
                assert conn._backlog is not None
                writer.transport.resume_reading()
                for cid in range(6):
                    frame = await asyncio.wait_for(_read_frame(reader), 20)
                    key = ApiKeys.FETCH if cid % 2 == 0 else ApiKeys.API_VERSIONS
                    h, body = decode_response(frame[4:], key, FETCH_VERSION if key == ApiKeys.FETCH else 3)
                    assert h.correlation_id == cid
                    if key == ApiKeys.FETCH:
                        assert bytes(body.responses[0].partitions[0].records) == data
                await _wait_for(lambda: conn._backlog is None and conn._wfd < 0, "the backlog never ended")
                writer.close()
            finally:
                await s.close()

        run(main(), loop)
    finally:
        os.close(fd)


async def _wait_conn(server: KafkaServer):
    await _wait_for(lambda: len(server._conns) == 1, "no connection")
    return next(iter(server._conns))


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("loop", LOOPS)
def test_a_log_truncated_under_a_pending_region_closes_the_connection_mid_frame(tmp_path, loop):
    kl = KafkaLog.open(str(tmp_path / "t-0"))
    try:
        values = [os.urandom(1000) for _ in range(6000)]
        kl.append_as_leader(build_batches(values, records_per_batch=100), 0)
        regions: list = []

        def handle(ctx, req):
            region = _file_region(kl.read(0, BIG + (1 << 20)))
            regions.append(region)
            return _answer([region])

        async def main():
            s = KafkaServer("127.0.0.1", 0, {ApiKeys.FETCH: handle}, listener_type="broker")
            await s.start()
            try:
                reader, writer = await _connect(s.port, slow=True)
                writer.write(encode_request(_fetch_request(), FETCH_VERSION, 1, "t"))
                conn = await _wait_conn(s)
                await _wait_for(lambda: conn._wfd >= 0, "the region never waited for the socket")
                assert regions[0].intact()
                kl.truncate_to(100)  # an unclean leader change's truncation, under the pending answer
                assert not regions[0].intact()
                writer.transport.resume_reading()
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                assert size > BIG
                with pytest.raises(asyncio.IncompleteReadError) as got:
                    await asyncio.wait_for(reader.readexactly(size), 20)
                assert 0 < len(got.value.partial) < size  # cut short: the client never sees a whole frame
                await _wait_for(lambda: not s._conns, "the connection stayed")
                # the server still serves: a new read of the truncated log is whole and intact
                reader, writer = await _connect(s.port)
                writer.write(encode_request(_fetch_request(), FETCH_VERSION, 2, "t"))
                frame = await asyncio.wait_for(_read_frame(reader), 20)
                _h, body = decode_response(frame[4:], ApiKeys.FETCH, FETCH_VERSION)
                assert bytes(body.responses[0].partitions[0].records) == kl.read(0, BIG).tobytes()
                writer.close()
            finally:
                await s.close()

        run(main(), loop)
    finally:
        kl.close()


@pytest.mark.parametrize("loop", LOOPS)
def test_a_client_gone_mid_region_leaves_nothing_behind(tmp_path, loop):
    fd, _data = _data_file(tmp_path, "seg", BIG)
    try:
        async def main():
            s = KafkaServer("127.0.0.1", 0, {ApiKeys.FETCH: _regions_handler([lambda: FileRegion(fd, 0, BIG)])},
                            listener_type="broker")
            await s.start()
            try:
                before = _open_fds()
                reader, writer = await _connect(s.port, slow=True)
                writer.write(encode_request(_fetch_request(), FETCH_VERSION, 1, "t"))
                conn = await _wait_conn(s)
                await _wait_for(lambda: conn._wfd >= 0, "the region never waited for the socket")
                writer.transport.abort()  # RST under the pending sendfile
                await _wait_for(lambda: not s._conns, "the connection stayed")
                await _wait_for(lambda: _open_fds() <= before, "a descriptor leaked")
                assert conn._wfd < 0 and conn._backlog is None
                # and the next client is served
                reader, writer = await _connect(s.port)
                writer.write(encode_request(_fetch_request(), FETCH_VERSION, 2, "t"))
                frame = await asyncio.wait_for(_read_frame(reader), 20)
                assert len(frame) > BIG
                writer.close()
            finally:
                await s.close()

        run(main(), loop)
    finally:
        os.close(fd)


@pytest.mark.parametrize("loop", LOOPS)
def test_tls_connections_copy_regions(tmp_path, loop):
    pki = Pki(str(tmp_path))
    ks, _, _ = pki.keystore("srv")
    fd, data = _data_file(tmp_path, "seg", 1 << 20)
    try:
        async def main():
            frames = []
            for tls in (False, True):
                seen: list = []
                s = KafkaServer("127.0.0.1", 0, {ApiKeys.FETCH: _regions_handler([lambda: FileRegion(fd, 7, 900_000)],
                                                                                seen)},
                                listener_type="broker",
                                ssl_context=server_context({"ssl.keystore.location": ks}, "SSL", "test")
                                if tls else None)
                await s.start()
                try:
                    ctx = client_context({"ssl.truststore.location": pki.cafile}) if tls else None
                    reader, writer = await _connect(s.port, ssl=ctx)
                    writer.write(encode_request(_fetch_request(), FETCH_VERSION, 9, "t"))
                    frames.append(await asyncio.wait_for(_read_frame(reader), 20))
                    writer.close()
                finally:
                    await s.close()
                assert seen == [not tls]
            assert frames[0] == frames[1]
            _h, body = decode_response(frames[1][4:], ApiKeys.FETCH, FETCH_VERSION)
            assert bytes(body.responses[0].partitions[0].records) == data[7:900_007]

        run(main(), loop)
    finally:
        os.close(fd)


def test_a_region_given_to_a_tls_connection_anyway_is_copied(tmp_path):
    """The server never sendfiles over TLS, even when a handler ignores ``ctx.zero_copy``."""
    pki = Pki(str(tmp_path))
    ks, _, _ = pki.keystore("srv")
    fd, data = _data_file(tmp_path, "seg", 100_000)
    try:
        async def main():
            s = KafkaServer("127.0.0.1", 0, {ApiKeys.FETCH: lambda ctx, req: _answer([FileRegion(fd, 0, 100_000)])},
                            listener_type="broker",
                            ssl_context=server_context({"ssl.keystore.location": ks}, "SSL", "test"))
            await s.start()
            try:
                reader, writer = await _connect(s.port, ssl=client_context({"ssl.truststore.location": pki.cafile}))
                writer.write(encode_request(_fetch_request(), FETCH_VERSION, 3, "t"))
                frame = await asyncio.wait_for(_read_frame(reader), 20)
                _h, body = decode_response(frame[4:], ApiKeys.FETCH, FETCH_VERSION)
                assert bytes(body.responses[0].partitions[0].records) == data
                writer.close()
            finally:
                await s.close()

        asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        os.close(fd)
