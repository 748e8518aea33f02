"""RaftDriver in-process over real sockets on 127.0.0.1: election, commit, resignation,
cluster-id validation, DescribeQuorum/DescribeCluster, restart from disk.

Every test runs under asyncio.wait_for with a hard deadline (no test can hang).
"""
from __future__ import annotations

import asyncio
import os
import time

import pytest
from support.raft import CLUSTER_ID, cluster_properties, free_ports

from kraft_node.network import KafkaConnection
from kraft_node.raft import messages as m
from kraft_node.raft.errors import NotLeaderError, RaftError
from kraft_node.raft.io import wire
from kraft_node.raft.io.driver import AUTO_THREAD_FLUSH_BYTES, DriverError
from kraft_node.raft.io.file_state import FileQuorumStateStore
from kraft_node.raft.io.kafka_log import KafkaRaftLog
from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode
from kraft_node.server.tools import metadata_quorum


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def start(paths, **kw):
    """Start a node per config file; returns the nodes (their drivers: ``n.driver``)."""
    ns = [KraftNode.from_config(NodeConfig.from_file(p), **kw) for p in paths]
    for n in ns:
        await n.start()
    return ns


async def wait_leader(ds, exclude=None, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leaders = [d for d in ds if d.is_leader and d is not exclude and not d._closed]
        if leaders:
            return max(leaders, key=lambda d: d.core.epoch)
        await asyncio.sleep(0.01)
    raise AssertionError(f"no leader within {timeout}s: {[d.role_changes[-1:] for d in ds]}")


def committed_values(cfg_path):
    cfg = NodeConfig.from_file(cfg_path)
    log = KafkaRaftLog(cfg.metadata_partition_dir)
    out = []
    pos = log.start_offset
    while pos < log.end_offset:
        bs = log.read(pos, 1 << 20)
        for b in bs:
            if not b.is_control:
                out.extend(b.records)
        pos = bs[-1].next_offset
    log.close()
    return out


@pytest.mark.parametrize("leader_flush,follower_flush", [("auto", "inline"), ("inline", "inline"),
                                                          ("thread", "inline"), ("aio", "inline"),
                                                          ("auto", "aio"), ("thread", "aio")])
def test_three_voters_elect_commit_and_resign(tmp_path, leader_flush, follower_flush):
    paths = cluster_properties(str(tmp_path), 3)

    async def go():
        ns = await start(paths, leader_flush=leader_flush, follower_flush=follower_flush)
        ds = [n.driver for n in ns]
        try:
            leader = await wait_leader(ds)
            ep = leader.leader_and_epoch.epoch
            offs = await asyncio.gather(*[leader.append([b"a%d" % i], ep) for i in range(50)])
            assert offs == sorted(offs) and len(set(offs)) == 50
            held = sum(d.core.stats["fetches_held_for_flush"] for d in ds)
            # with "aio" the followers' Fetches after an append wait for the fsync job
            assert (held > 0) == (follower_flush == "aio"), held
            # every voter's listener-visible state follows: high watermarks converge
            epoch = leader.core.epoch
            t0 = time.monotonic()
            leader.resign(leader.leader_and_epoch.epoch)
            new = await wait_leader(ds, exclude=leader, timeout=5)
            failover = time.monotonic() - t0
            assert new.core.epoch > epoch
            assert failover < 2.0, failover
            with pytest.raises(NotLeaderError):  # an append names the epoch it was prepared in
                new.append([b"stale"], epoch)
            offs2 = await asyncio.gather(*[new.append([b"b%d" % i], new.leader_and_epoch.epoch) for i in range(20)])
            assert min(offs2) > max(offs)
            # the old leader follows the new one
            deadline = time.monotonic() + 5
            while leader.core.leader_id != new.node_id and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert leader.core.leader_id == new.node_id
        finally:
            for n in ns:
                await n.shutdown(2)

    run(go())
    expected = [b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(20)]
    for p in paths:
        assert committed_values(p)[:70] == expected


def test_unknown_flush_modes_are_refused(tmp_path):
    paths = cluster_properties(str(tmp_path), 1)
    cfg = NodeConfig.from_file(paths[0])
    with pytest.raises(DriverError, match="follower_flush must be one of inline, aio, not 'thread'"):
        KraftNode.from_config(cfg, follower_flush="thread")
    with pytest.raises(DriverError, match="leader_flush must be one of"):
        KraftNode.from_config(cfg, leader_flush="later")


def test_auto_leader_flush_is_native_aio_when_native_code_runs(tmp_path):
    """"auto" means the AIO flusher where it exists (session 7 measurements), else the
    in-line/thread rule; the twins' run (KRAFT_NO_EXTENSIONS=1) keeps the latter."""
    from kraft_storage.log.fdsync import native_aio_available
    paths = cluster_properties(str(tmp_path), 1)
    d = KraftNode.from_config(NodeConfig.from_file(paths[0])).driver
    want = "aio" if native_aio_available() else "auto"
    assert d.leader_flush == want
    assert d.core.options.flush.min_bytes == (0 if want == "aio" else AUTO_THREAD_FLUSH_BYTES)
    d.log.close()


def test_append_on_follower_is_refused(tmp_path):
    paths = cluster_properties(str(tmp_path), 3)

    async def go():
        ns = await start(paths)
        ds = [n.driver for n in ns]
        try:
            leader = await wait_leader(ds)
            follower = next(d for d in ds if d is not leader)
            with pytest.raises(NotLeaderError):
                follower.append([b"x"], follower.leader_and_epoch.epoch)
        finally:
            for n in ns:
                await n.shutdown(2)

    run(go())


def test_cluster_id_is_validated_on_every_rpc(tmp_path):
    paths = cluster_properties(str(tmp_path), 3)

    async def go():
        ns = await start(paths)
        ds = [n.driver for n in ns]
        try:
            leader = await wait_leader(ds)
            conn = await KafkaConnection.open("127.0.0.1", leader.endpoint.port)
            try:
                bad = [m.VoteRequest("not-this-cluster", leader.node_id, leader.core.epoch + 5, 2, None, None, 1, 5),
                       m.FetchRequest("not-this-cluster", 2, 0, leader.core.epoch, 0, 0),
                       m.BeginQuorumEpochRequest("not-this-cluster", leader.node_id, None, 2, 99),
                       m.EndQuorumEpochRequest("not-this-cluster", 2, 99, ()),
                       m.FetchSnapshotRequest("not-this-cluster", 2, 100, leader.core.epoch, m.OffsetAndEpoch(1, 1), 0)]
                for req in bad:
                    body, v = wire.request_to_wire(req)
                    resp = wire.response_from_wire(await conn.request(body, v, timeout=5))
                    assert resp.error_code == 104, (type(req).__name__, resp)
                # and the right cluster id gets a real answer
                body, v = wire.request_to_wire(m.FetchRequest(CLUSTER_ID, 2, 0, leader.core.epoch, 0, 0))
                resp = wire.response_from_wire(await conn.request(body, v, timeout=5))
                assert resp.error_code == 0 and resp.current_leader.leader_id == leader.node_id
            finally:
                await conn.close()
            assert leader.is_leader  # the bogus epochs did not disturb the quorum
        finally:
            for n in ns:
                await n.shutdown(2)

    run(go())


def test_describe_quorum_and_cluster(tmp_path):
    paths = cluster_properties(str(tmp_path), 3, observers=1)

    async def go():
        ns = await start(paths)
        ds = [n.driver for n in ns]
        try:
            leader = await wait_leader(ds)
            await asyncio.gather(*[leader.append([b"z"], leader.leader_and_epoch.epoch) for _ in range(5)])
            # wait until the observer fetched from the leader
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if 4 in leader.core.state.observers:
                    break
                await asyncio.sleep(0.02)
            cluster, quorum = await metadata_quorum.fetch("127.0.0.1", leader.endpoint.port, 5)
            assert cluster.cluster_id == CLUSTER_ID and cluster.controller_id == leader.node_id
            text = metadata_quorum.format_status(cluster.cluster_id, quorum)
            assert f"LeaderId:               {leader.node_id}" in text
            assert '"id": 4' in text.split("CurrentObservers:")[1]
            p = quorum.topics[0].partitions[0]
            assert sorted(v.replica_id for v in p.current_voters) == [1, 2, 3]
            assert all(v.replica_directory_id == metadata_quorum.ZERO_UUID for v in p.current_voters)
            assert p.high_watermark >= 6
            now_wall = time.time() * 1000
            for v in p.current_voters:  # Kafka's LastFetchTimestamp / LastCaughtUpTimestamp
                assert now_wall - 10_000 < v.last_caught_up_timestamp <= v.last_fetch_timestamp <= now_wall + 1
            follower = next(d for d in ds[:3] if d is not leader)
            _, fq = await _raw_describe(follower.endpoint.port)
            assert fq.topics[0].partitions[0].error_code == 6  # NOT_LEADER_OR_FOLLOWER
            # the tool reaches the active controller from any controller, and past a dead address
            dead = free_ports(1)[0]
            fport = follower.endpoint.port
            for targets in ([("127.0.0.1", fport)], [("127.0.0.1", dead), ("127.0.0.1", fport)]):
                c2, q2 = await metadata_quorum.fetch_from(targets, 5)
                assert c2.cluster_id == CLUSTER_ID
                assert q2.topics[0].partitions[0].leader_id == leader.node_id
                assert q2.topics[0].partitions[0].error_code == 0
            obs = ds[3]
            assert not obs.is_voter and obs.core.leader_id == leader.node_id
        finally:
            for n in ns:
                await n.shutdown(2)

    run(go())


async def _raw_describe(port):
    conn = await KafkaConnection.open("127.0.0.1", port)
    try:
        from kraft_node.protocol.generated.describe_cluster import DescribeClusterRequest
        c = await conn.request(DescribeClusterRequest(endpoint_type=2), 1, timeout=5)
        q = await conn.request(metadata_quorum.describe_request(), 2, timeout=5)
        return c, q
    finally:
        await conn.close()


def test_restart_from_disk_keeps_log_and_epoch(tmp_path):
    paths = cluster_properties(str(tmp_path), 3)

    async def phase1():
        ns = await start(paths)
        ds = [n.driver for n in ns]
        try:
            leader = await wait_leader(ds)
            await asyncio.gather(*[leader.append([b"p1-%d" % i], leader.leader_and_epoch.epoch) for i in range(10)])
            return leader.core.epoch
        finally:
            for n in ns:
                await n.close()  # abrupt stop: no resignation

    epoch1 = run(phase1())
    for p in paths:
        st = FileQuorumStateStore(NodeConfig.from_file(p).metadata_partition_dir).read()
        assert st.epoch >= epoch1

    async def phase2():
        ns = await start(paths)
        ds = [n.driver for n in ns]
        try:
            leader = await wait_leader(ds)
            assert leader.core.epoch > epoch1
            await asyncio.gather(*[leader.append([b"p2-%d" % i], leader.leader_and_epoch.epoch) for i in range(10)])
        finally:
            for n in ns:
                await n.shutdown(2)

    run(phase2())
    want = [b"p1-%d" % i for i in range(10)] + [b"p2-%d" % i for i in range(10)]
    for p in paths:
        assert committed_values(p)[:20] == want


def test_unformatted_or_foreign_storage_is_refused(tmp_path):
    paths = cluster_properties(str(tmp_path), 1)
    cfg = NodeConfig.from_file(paths[0])
    os.remove(os.path.join(cfg.metadata_log_dir, "meta.properties"))
    with pytest.raises(DriverError, match="not found"):
        KraftNode.from_config(cfg)
    text = open(paths[0]).read().replace("node.id=1", "node.id=7").replace("1@127", "7@127")
    other = tmp_path / "other.properties"
    other.write_text(text)
    paths2 = cluster_properties(str(tmp_path / "b"), 1)
    cfg2 = NodeConfig.from_file(paths2[0])
    text2 = open(paths2[0]).read().replace("node.id=1", "node.id=7").replace("1@127", "7@127")
    p2 = tmp_path / "b" / "wrong.properties"
    p2.write_text(text2)
    with pytest.raises(DriverError, match="belongs to node 1"):
        KraftNode.from_config(NodeConfig.from_file(str(p2)))
    assert cfg2.node_id == 1


class Recorder:
    def __init__(self):
        self.records = []
        self.snapshots = []
        self.leaders = []

    def handle_commit(self, batches):
        for b in batches:
            assert b.base_offset == len(self.records) or self.snapshots, (b.base_offset, len(self.records))
            self.records.extend((b.base_offset + i, r, b.is_control) for i, r in enumerate(b.records))

    def handle_load_snapshot(self, reader):
        sid = reader.snapshot_id
        self.snapshots.append((sid, [b.records for b in reader]))
        self.records = [(i, None, None) for i in range(sid.offset)]

    def handle_leader_change(self, leader):
        self.leaders.append(leader)


def test_snapshot_is_fetched_over_tcp_by_a_wiped_follower(tmp_path):
    """A follower that lost its log catches up with FetchSnapshot (v1) + Fetch over TCP,
    and its listener sees the snapshot, then the records after it, in order."""
    import shutil
    paths = cluster_properties(str(tmp_path), 3, extra={"controller.quorum.fetch.snapshot.max.bytes": "1000"})

    async def go():
        ns = await start(paths)
        ds = [n.driver for n in ns]
        try:
            leader = await wait_leader(ds)
            await asyncio.gather(*[leader.append([b"s%d" % i], leader.leader_and_epoch.epoch) for i in range(30)])
            hwm = leader.core.high_watermark
            epoch = leader.log.read(hwm - 1, 1)[0].epoch
            sid = m.OffsetAndEpoch(hwm, epoch)
            # several batches, several FetchSnapshot slices with a small max
            payload = [tuple(os.urandom(100) for _ in range(5)) for _ in range(6)]
            with pytest.raises(RaftError, match="beyond the high watermark"):
                leader.create_snapshot(m.OffsetAndEpoch(hwm + 1, epoch))
            w = leader.create_snapshot(sid)
            for records in payload:
                w.append(records)
            w.freeze()
            name = "%020d-%010d.checkpoint" % (sid.offset, sid.epoch)
            size = os.path.getsize(os.path.join(leader.partition_dir, name))
            assert leader.log.start_offset == hwm
            victim = next(d for d in ds if d is not leader)
            idx = ds.index(victim)
            await ns[idx].close()
            shutil.rmtree(victim.partition_dir)
            ns[idx] = KraftNode.from_config(NodeConfig.from_file(paths[idx]))
            fresh = ns[idx].driver
            rec = Recorder()
            fresh.register_listener(rec)
            await ns[idx].start()
            ds[idx] = fresh
            tail = await asyncio.gather(*[leader.append([b"t%d" % i], leader.leader_and_epoch.epoch) for i in range(5)])
            deadline = time.monotonic() + 10
            while (not rec.records or rec.records[-1][0] < tail[-1]) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            # every record in order (Kafka's writer packs appends into batches of up to 8 MiB)
            assert [(s, [r for b in batches for r in b]) for s, batches in rec.snapshots] == \
                [(sid, [r for b in payload for r in b])]
            assert fresh.log.latest_snapshot_id() == sid
            assert fresh.log.read_snapshot(sid) == leader.log.read_snapshot(sid)
            assert fresh.log.start_offset == sid.offset
            data = [r for o, r, c in rec.records if o >= sid.offset and not c]
            assert data == [b"t%d" % i for i in range(5)]
            assert fresh.core.stats["snapshots_installed"] == 1
            assert fresh.core.stats["snapshot_slices"] == -(-size // 1000)  # in 1000-byte FetchSnapshot slices
        finally:
            for n in ns:
                await n.shutdown(2)

    run(go())


class _Seen:
    """Listener recording committed batches (with control records) as the leader's listener sees them."""

    def __init__(self):
        self.batches = []

    def handle_commit(self, batches):
        self.batches.extend(batches)

    def handle_load_snapshot(self, reader):
        pass

    def handle_leader_change(self, leader):
        pass


def _standalone(tmp_path):
    import io

    from support.raft import free_ports

    from kraft_node.server.tools.storage import format_storage
    (port,) = free_ports(1)
    p = tmp_path / "server.properties"
    p.write_text("process.roles=controller\nnode.id=1\n"
                 f"controller.quorum.bootstrap.servers=127.0.0.1:{port}\n"
                 f"listeners=CONTROLLER://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n"
                 f"log.dirs={tmp_path}/data\ncontroller.quorum.election.timeout.ms=5000\n")
    format_storage(NodeConfig.from_file(str(p)), CLUSTER_ID, standalone=True, out=io.StringIO())
    return str(p)


def test_standalone_node_leads_from_the_bootstrap_snapshot_and_again_at_once_after_restart(tmp_path):
    """kraft-storage format --standalone: the voter set (with directory id and endpoint) comes
    from the (0, 0) snapshot; the leader's own listener sees the LeaderChange record with
    Kafka's real body; after a restart the only voter leads the next epoch at once (Kafka's
    rule) instead of waiting out an election timeout (5 s here) as Resigned."""
    from kraft_node.raft.io.kafka_log import decode_leader_change
    path = _standalone(tmp_path)

    async def go():
        node = KraftNode.from_config(NodeConfig.from_file(path))
        d = node.driver
        seen = _Seen()
        d.register_listener(seen)
        await node.start()
        try:
            assert d.dynamic and d.is_voter and d.core.kraft_version == 1
            (e,) = d.core.voter_set.entries
            assert e.key == d.local_key and e.endpoints[0].port == node.port
            await wait_leader([d], timeout=5)
            await d.append([b"x"], d.leader_and_epoch.epoch)
            lc = next(b for b in seen.batches if b.is_control)
            assert decode_leader_change(lc.records[0]) == lc.control  # the real body, not a placeholder
            epoch = d.core.epoch
        finally:
            await node.close()
        data, version = FileQuorumStateStore(d.partition_dir).read_data()
        assert version == 1 and data.leader_id == 1  # kraft.version 1 -> quorum-state data_version 1
        t0 = time.monotonic()
        node2 = KraftNode.from_config(NodeConfig.from_file(path))
        d2 = node2.driver
        await node2.start()
        try:
            await wait_leader([d2], timeout=3)
            assert time.monotonic() - t0 < 3 and d2.core.epoch == epoch + 1
            assert "Resigned" not in [r for r, _, _ in d2.role_changes]
            assert await d2.append([b"y"], d2.leader_and_epoch.epoch) >= 2
        finally:
            await node2.close()

    run(go(), timeout=30)


def test_initial_controllers_quorum_elects_and_replicates_from_the_bootstrap_snapshot(tmp_path):
    """Three nodes formatted with kraft-storage format --initial-controllers (directory ids
    given): the voter set comes from each node's (0, 0) snapshot, a leader is elected, records
    commit on every node, and DescribeQuorum reports each voter's directory id and endpoint."""
    import io

    from support.raft import free_ports

    from kraft_node.server.tools.storage import format_storage, random_uuid
    ports = free_ports(3)
    dirs = [random_uuid() for _ in range(3)]
    initial = ",".join(f"{i + 1}@127.0.0.1:{ports[i]}:{dirs[i]}" for i in range(3))
    paths = []
    for i in range(3):
        p = tmp_path / f"n{i + 1}.properties"
        p.write_text(f"process.roles=controller\nnode.id={i + 1}\n"
                     f"controller.quorum.bootstrap.servers=127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}\n"
                     f"listeners=CONTROLLER://127.0.0.1:{ports[i]}\ncontroller.listener.names=CONTROLLER\n"
                     f"log.dirs={tmp_path}/d{i + 1}\ncontroller.quorum.election.timeout.ms=500\n"
                     "controller.quorum.fetch.timeout.ms=1000\ncontroller.quorum.append.linger.ms=5\n")
        format_storage(NodeConfig.from_file(str(p)), CLUSTER_ID, initial_controllers=initial, out=io.StringIO())
        paths.append(str(p))

    async def go():
        ns = await start(paths)
        ds = [n.driver for n in ns]
        try:
            assert all(d.dynamic and d.is_voter and d.core.voter_set.ids == {1, 2, 3} for d in ds)
            leader = await wait_leader(ds)
            await asyncio.gather(*[leader.append([b"r%d" % i], leader.leader_and_epoch.epoch) for i in range(20)])
            conn = await KafkaConnection.open("127.0.0.1", leader.endpoint.port, timeout=2)
            try:
                q = await conn.request(metadata_quorum.describe_request(), 2, timeout=2)
            finally:
                await conn.close()
            p = q.topics[0].partitions[0]
            assert {v.replica_id: str(v.replica_directory_id) for v in p.current_voters} == \
                {i + 1: dirs[i] for i in range(3)}
            assert {n.node_id: n.listeners[0].port for n in q.nodes} == {i + 1: ports[i] for i in range(3)}
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and any((d.core.high_watermark or 0) < leader.core.high_watermark
                                                      for d in ds):
                await asyncio.sleep(0.02)
        finally:
            for n in ns:
                await n.close()

    run(go(), timeout=40)
    for p in paths:
        assert committed_values(p) == [b"r%d" % i for i in range(20)]


def test_observer_learns_the_voter_set_from_the_epoch_start_records(tmp_path):
    """A --no-initial-controllers observer knows no voter at start; the leader of a kraft.version 1
    quorum begins its epoch with KRaftVersion and Voters records (as Kafka does), so the
    observer learns the voter set -- directory id and endpoint included -- from the log."""
    import io

    from support.raft import free_ports

    from kraft_node.raft.messages import KRaftVersionControl, VotersControl
    from kraft_node.server.tools.storage import format_storage
    ports = free_ports(2)
    paths = []
    for i in range(2):
        p = tmp_path / f"n{i + 1}.properties"
        p.write_text(f"process.roles=controller\nnode.id={i + 1}\n"
                     f"controller.quorum.bootstrap.servers=127.0.0.1:{ports[0]}\n"
                     f"listeners=CONTROLLER://127.0.0.1:{ports[i]}\ncontroller.listener.names=CONTROLLER\n"
                     f"log.dirs={tmp_path}/d{i + 1}\n")
        format_storage(NodeConfig.from_file(str(p)), CLUSTER_ID, standalone=(i == 0),
                       no_initial_controllers=(i == 1), out=io.StringIO())
        paths.append(str(p))

    async def go():
        ns = await start(paths)
        ds = [n.driver for n in ns]
        leader, obs = ds
        try:
            assert not obs.is_voter and obs.core.voter_set.ids == frozenset()
            await wait_leader([leader], timeout=5)
            await leader.append([b"x"], leader.leader_and_epoch.epoch)
            deadline = time.monotonic() + 5
            while obs.core.voter_set.ids != {1} and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert obs.core.voter_set == leader.core.voter_set
            assert obs.core.kraft_version == 1 and not obs.is_voter
            assert obs.address_of(1) == ("127.0.0.1", ports[0])
            controls = [b.control for b in leader.log.read(0, 1 << 20) if b.is_control]
            assert [type(c) for c in controls] == [m.LeaderChangeMessage, KRaftVersionControl, VotersControl]
        finally:
            for n in ns:
                await n.close()

    run(go(), timeout=30)


def test_old_request_versions_get_answers_without_node_endpoints(tmp_path):
    """The leader adds its NodeEndpoint to Raft responses only at versions that carry the field:
    a Vote v0 or Fetch v13 from an older peer still gets a well-formed answer."""
    from kraft_node.protocol.generated import fetch as g_fetch
    from kraft_node.protocol.generated import vote as g_vote
    from kraft_storage.messages.runtime import METADATA_TOPIC_ID
    path = _standalone(tmp_path)

    async def go():
        node = KraftNode.from_config(NodeConfig.from_file(path))
        d = node.driver
        await node.start()
        try:
            await wait_leader([d], timeout=5)
            conn = await KafkaConnection.open("127.0.0.1", node.port, timeout=2)
            try:
                R = g_vote.VoteRequest
                body = R(cluster_id=CLUSTER_ID, topics=[R.TopicData(topic_name="__cluster_metadata", partitions=[
                    R.PartitionData(partition_index=0, replica_epoch=0, replica_id=7, last_offset_epoch=0,
                                    last_offset=0)])])
                v0 = await conn.request(body, 0, timeout=2)
                v2 = await conn.request(body, 2, timeout=2)
                assert v0.topics[0].partitions[0].leader_id == 1 and v0.node_endpoints == []
                assert [(n.node_id, n.port) for n in v2.node_endpoints] == [(1, node.port)]
                F = g_fetch.FetchRequest
                part = F.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                        partition_max_bytes=1000)
                fbody = F(cluster_id=CLUSTER_ID, replica_id=-1, max_wait_ms=0,
                          topics=[F.FetchTopic(topic_id=METADATA_TOPIC_ID, partitions=[part])])
                f13 = await conn.request(fbody, 13, timeout=2)
                assert f13.error_code == 0 and f13.responses[0].partitions[0].current_leader.leader_id == 1
            finally:
                await conn.close()
        finally:
            await node.close()

    run(go(), timeout=30)


class _FailingFlusher:
    """Wraps a kraft_storage.log.fdsync flusher: every job it finishes reports EIO."""

    def __init__(self, inner):
        self.inner = inner

    def fileno(self):
        return self.inner.fileno()

    def submit(self, fds, token):
        self.inner.submit(fds, token)

    def reap(self):
        return [(t, OSError(5, "Input/output error (injected)")) for t, _ in self.inner.reap()]

    def close(self):
        self.inner.close()


@pytest.mark.parametrize("leader_flush", ["auto", "inline", "thread", "aio"])
def test_failed_leader_fsync_stops_the_node_without_acknowledging(tmp_path, monkeypatch, leader_flush):
    """An fsync error on the leader -- on its loop, on its flush thread or reported by the
    AIO flusher -- is fatal for the node (as a failed log directory is for Kafka): no append
    is acknowledged, the interpreter and the event loop carry on, and close() still works."""
    p = _standalone(tmp_path)

    async def go():
        node = KraftNode.from_config(NodeConfig.from_file(p), leader_flush=leader_flush)
        d = node.driver
        await node.start()
        try:
            t0 = time.monotonic()
            while not d.is_leader and time.monotonic() - t0 < 10:
                await asyncio.sleep(0.01)
            assert d.is_leader
            await asyncio.wait_for(d.append([b"before"], d.leader_and_epoch.epoch), 10)  # the normal path works

            def broken(fd):
                raise OSError(5, "Input/output error (injected)")

            monkeypatch.setattr(os, "fdatasync", broken)
            if d._flusher is not None:  # "aio": the kernel fsyncs, the flusher reports
                d._flusher = _FailingFlusher(d._flusher)
            elif d.leader_flush == "aio":
                pytest.fail("the aio leader flushed without its flusher")
            fut = d.append([b"after"], d.leader_and_epoch.epoch)
            t0 = time.monotonic()
            while d.fatal is None and time.monotonic() - t0 < 10:
                await asyncio.sleep(0.01)
            assert isinstance(d.fatal, OSError)
            assert not fut.done() or fut.exception() is not None
        finally:
            monkeypatch.undo()
            await node.close()
        assert fut.done() and fut.exception() is not None

    run(go())


def test_appends_within_the_linger_wake_the_leader_once_not_per_append(tmp_path):
    """Kafka's scheduleAppend rule: an append polls at once only when the batch is due;
    otherwise the driver just makes sure it wakes when the linger expires.  A burst of
    appends inside one linger therefore costs no poll per append, lands in one batch,
    and still commits (by the timer) no earlier than the linger after the first."""
    paths = cluster_properties(str(tmp_path), 3, extra={"controller.quorum.append.linger.ms": "200"})

    async def go():
        ns = await start(paths)
        ds = [n.driver for n in ns]
        try:
            leader = await wait_leader(ds)
            await leader.append([b"warm-up"], leader.leader_and_epoch.epoch)
            # let the followers learn the warm-up's high watermark (Fetch v18 tells the leader
            # theirs, so their next Fetch is answered at once) and park again before counting
            await asyncio.sleep(0.1)
            polls = []
            real_poll = leader.core.poll

            def counting_poll(now_ms):
                polls.append(now_ms)
                return real_poll(now_ms)
            leader.core.poll = counting_poll
            t0 = time.monotonic()
            futs = []
            for i in range(40):
                futs.append(leader.append([b"r%d" % i], leader.leader_and_epoch.epoch))
                await asyncio.sleep(0)  # let a poll the append scheduled run
            await asyncio.sleep(0.05)
            # none of the 40 appends polled (a parked Fetch timing out may have)
            assert len(polls) <= 2, len(polls)
            offs = await asyncio.gather(*futs)
            waited = time.monotonic() - t0
            assert offs == list(range(offs[0], offs[0] + 40))
            assert waited >= 0.19, waited  # the linger was honoured
            batches = leader.log.read(offs[0], 1 << 20)
            assert batches[0].base_offset == offs[0] and len(batches[0].records) == 40  # one batch
        finally:
            for n in ns:
                await n.shutdown(2)

    run(go())


def test_requests_held_behind_a_flush_are_sent_when_it_lands_and_failed_when_it_was_overtaken(tmp_path):
    """A follower's Fetch held behind its fsync job (``follower_flush="aio"``) goes out when
    the job lands durable; if a truncation overtook the job (``handle_flush_done`` returned
    False) it must not: an encoded one is abandoned, an unencoded one answered with an error
    for the core to retry."""
    from kraft_node.network import ConnectionClosed
    from kraft_node.raft.errors import Errors
    paths = cluster_properties(str(tmp_path), 1)

    class Conn:
        def __init__(self):
            self.calls = []

        def write_held(self, corr, frame):
            self.calls.append(("write", corr, frame))

        def abandon(self, corr, exc):
            self.calls.append(("abandon", corr, type(exc)))

    async def go():
        d = KraftNode.from_config(NodeConfig.from_file(paths[0]), follower_flush="aio").driver
        try:
            d.loop = asyncio.get_running_loop()
            delivered, sent = [], []
            d._deliver = lambda out, resp: delivered.append((out, resp))
            d._send_request = sent.append
            for durable in (False, True):
                job, conn = object(), Conn()
                fetch = m.FetchRequest(d.cluster_id, 1, 500, 0, 0, 0, 0, None, -1)
                out = m.OutboundRequest(2, 7, fetch, 0, job)
                d._held[id(job)] = [(conn, 11, b"frame"), out]
                d._release_held(job, durable)
                await asyncio.sleep(0)
                assert id(job) not in d._held
                if durable:
                    assert conn.calls == [("write", 11, b"frame")] and sent == [out]
                else:
                    assert conn.calls == [("abandon", 11, ConnectionClosed)] and sent == []
                    assert delivered[0][0] is out
                    assert delivered[0][1].error_code == int(Errors.BROKER_NOT_AVAILABLE)
        finally:
            d.log.close()
    run(go())
