"""A kraft controller started on a metadata log directory Kafka wrote (issue 21, Deliver 10).

Each Kafka fixture (copied) is started as a single-voter controller with node.id 1, as the
Kafka process that wrote it ran: the controller replays it (snapshot, then log) into
Kafka's state -- its metadata.version and its topics -- becomes the active controller of
that cluster and goes on writing: a broker registers and is given an epoch.  What it wrote
decodes with the generated codecs and with ``kraft-dump-log``; restarted, it replays its
own records together with Kafka's into the same state.
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import FIXTURES, require_fixtures
from support.controller import broker_registration
from support.raft import free_ports

from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode
from kraft_storage.messages import metadata as m
from kraft_storage.messages.metadata import decode_metadata_record
from kraft_storage.meta_properties import read_meta_properties

#: fixture -> (its metadata.version, a topic it holds or None)
CASES = {
    "kafka-3.6.0-combined-single-node": (14, None),
    "kafka-3.7.0-combined-single-node": (19, "__consumer_offsets"),
    "kafka-4.0.0-combined-single-node": (25, None),
    "kafka-4.2-mv29-combined-single-node": (29, "test-topic"),
}


def _config(log_dir: str, port: int) -> NodeConfig:
    path = os.path.join(os.path.dirname(log_dir), "server.properties")
    with open(path, "w") as f:
        f.write(f"process.roles=controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{port}\n"
                f"listeners=CONTROLLER://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n"
                f"log.dirs={log_dir}\nmetadata.max.idle.interval.ms=0\n")
    return NodeConfig.from_file(path)


async def _until_active(node: KraftNode, timeout: float = 20.0):
    ctl = node.controller.controller
    deadline = time.monotonic() + timeout
    while not (ctl.active and not len(ctl.purgatory)
               and ctl.feature_control.metadata_version_or_none(epoch=ctl.last_stable_offset) is not None):
        assert node.fatal is None, node.fatal
        assert time.monotonic() < deadline, "the controller did not become active"
        await asyncio.sleep(0.02)
    return ctl


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_controller_carries_on_a_kafka_written_cluster(tmp_path, name, caplog):
    require_fixtures()
    mv, topic = CASES[name]
    log_dir = str(tmp_path / "data")
    shutil.copytree(FIXTURES / name, log_dir)
    cluster_id = read_meta_properties(log_dir, check_cluster_id=False).meta.cluster_id
    (port,) = free_ports(1)
    cfg = _config(log_dir, port)

    async def first_run():
        node = KraftNode.from_config(cfg, controller=True)
        await node.start()
        try:
            ctl = await _until_active(node)
            lso = ctl.last_stable_offset
            assert ctl.feature_control.metadata_version(epoch=lso).feature_level == mv
            if topic is not None:
                assert ctl.replication_control.topic_id(topic, epoch=lso) is not None
            reply = await asyncio.wait_for(_await(ctl.register_broker(broker_registration(7, cluster_id))), 10)
            assert reply.epoch > 0
            while ctl.last_stable_offset < reply.epoch:
                await asyncio.sleep(0.02)
            assert ctl.cluster_control.registration(7, epoch=ctl.last_stable_offset).epoch == reply.epoch
            return reply.epoch, _digest(ctl)
        finally:
            await node.shutdown(2.0)

    async def second_run():
        node = KraftNode.from_config(cfg, controller=True)
        await node.start()
        try:
            ctl = await _until_active(node)
            return _digest(ctl), ctl.cluster_control.registration(7)
        finally:
            await node.shutdown(2.0)

    epoch, digest = asyncio.run(first_run())
    digest2, reg = asyncio.run(second_run())
    assert digest2 == digest  # Kafka's records and ours replay into the same state again
    assert reg is not None and reg.epoch == epoch

    # what kraft wrote decodes with the generated codecs and kraft-dump-log
    part = os.path.join(log_dir, "__cluster_metadata-0")
    segments = sorted(n for n in os.listdir(part) if n.endswith(".log"))
    assert segments
    files = [os.path.join(part, s) for s in segments]
    dump = subprocess.run([sys.executable, "-m", "kraft_storage.tools.dump_log", *files],
                          capture_output=True, text=True, timeout=60)
    assert dump.returncode == 0, dump.stderr
    assert "RegisterBrokerRecord" in dump.stdout and '"BrokerId":7' in dump.stdout
    as_json = subprocess.run([sys.executable, "-m", "kraft_storage.tools.dump_log", "--json", *files],
                             capture_output=True, text=True, timeout=60)
    assert as_json.returncode == 0, as_json.stderr
    decoded = 0
    for line in as_json.stdout.splitlines():
        batch = json.loads(line)
        assert batch["crcValid"], batch
        if batch["isControl"]:
            continue
        for i, rec in enumerate(batch["records"]):
            decode_metadata_record(base64.b64decode(rec["value"]), batch["baseOffset"] + i)
            decoded += 1
    assert decoded > 0
    if name.startswith("kafka-3.7.0"):
        assert any("is not a Kafka base64 Uuid; accepted because" in r.getMessage() for r in caplog.records)


def _digest(ctl) -> list[bytes]:
    """The committed state's records but the controllers' own registrations: each start
    registers this controller again with a new incarnation id (KIP-919), and when that lands
    relative to the other records is timing."""
    return sorted(v for v in ctl.snapshot_values(ctl.last_stable_offset)
                  if decode_metadata_record(v)[0] != m.RegisterControllerRecord.API_KEY)


async def _await(fut):
    from kraft_node.server.controller import to_asyncio
    return await to_asyncio(fut)


def test_a_fresh_directory_still_needs_a_uuid_cluster_id(tmp_path):
    """The exception is for existing clusters only: a formatted directory without a
    metadata log and a non-Uuid id is refused (issue 19's rule)."""
    require_fixtures()
    log_dir = str(tmp_path / "data")
    os.makedirs(log_dir)
    shutil.copy(FIXTURES / "kafka-3.7.0-combined-single-node" / "meta.properties", log_dir)
    shutil.copy(FIXTURES / "kafka-3.7.0-combined-single-node" / "bootstrap.checkpoint", log_dir)
    (port,) = free_ports(1)
    cfg = _config(log_dir, port)
    with pytest.raises(Exception, match="is not a Kafka base64 Uuid"):
        KraftNode.from_config(cfg, controller=True)
