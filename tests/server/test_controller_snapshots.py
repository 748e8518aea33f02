"""Snapshots of a controller node's metadata log through the Raft snapshot API (issue 21, Deliver 6;
issue 23 item 5: written by the node's metadata loader from its published image, as Kafka 3.5+
does -- the QuorumController writes none).

With a small ``metadata.log.max.record.bytes.between.snapshots`` a running node writes a Kafka
``.checkpoint`` of its committed image: a valid Kafka checkpoint (header, the records, footer;
``kraft-dump-log`` reads it) whose prefix of the log is deleted, and a restarted node loads it --
into the controller's state and into the loader's image -- and comes back with the same state.
"""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

from support.controller import broker_registration
from support.raft import cluster_properties

from kraft_node.server.config import NodeConfig
from kraft_node.server.controller import to_asyncio
from kraft_node.server.node import KraftNode
from kraft_storage.messages import metadata as m
from kraft_storage.messages.metadata import decode_metadata_record
from kraft_storage.snapshot.records import RecordsSnapshotReader


def _checkpoints(part: str) -> list[str]:
    return sorted(n for n in os.listdir(part) if n.endswith(".checkpoint") and not n.startswith("0000000000000000000-"))


def _state(ctl) -> list[bytes]:
    return sorted(v for v in ctl.snapshot_values(ctl.last_stable_offset)
                  if decode_metadata_record(v)[0] != m.RegisterControllerRecord.API_KEY)


def _image_state(image) -> tuple:
    """What a restart must bring back in the image (the controllers' own registrations change)."""
    return (image.features, dict(image.cluster.brokers), image.topics, image.configs, image.producer_ids)


def test_the_controller_snapshots_its_state_and_a_restart_loads_it(tmp_path):
    (path,) = cluster_properties(str(tmp_path), 1)
    with open(path, "a") as f:
        f.write("\nmetadata.log.max.record.bytes.between.snapshots=2000\nmetadata.max.idle.interval.ms=0\n")
    cfg = NodeConfig.from_file(path)
    part = cfg.metadata_partition_dir

    async def first():
        node = KraftNode.from_config(cfg, controller=True)
        await node.start()
        try:
            ctl = node.controller.controller
            deadline = time.monotonic() + 15
            while not (ctl.active and ctl.feature_control.metadata_version_or_none(epoch=ctl.last_stable_offset)):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            for b in range(1, 31):
                req = broker_registration(b, node.cluster_id, port=9092 + b, rack=f"r{b % 3}")
                await to_asyncio(ctl.register_broker(req))
            md = node.metadata
            assert ctl.snapshot_generator is None  # the loader writes this node's snapshots
            gen, emitter = md.snapshot_generator, md.snapshot_emitter
            assert gen.max_bytes_since_last_snapshot == 2000  # metadata.log.max.record.bytes.between.snapshots
            while not emitter.history or gen.emitting or len(md.image().cluster.brokers) < 30:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            # the log before the snapshot is dropped (Kafka's log start moves up to the snapshot;
            # whole segments below it are deleted)
            last = emitter.history[-1]
            assert node.driver.core.log.start_offset == last.snapshot_id.offset
            return _state(ctl), last, _image_state(md.image())
        finally:
            await node.shutdown(2.0)

    state, last, image_state = asyncio.run(first())
    sid = last.snapshot_id
    assert last.records > 30 and last.slices >= 1
    name = f"{sid.offset:020d}-{sid.epoch:010d}.checkpoint"
    assert name in os.listdir(part)
    # a valid Kafka checkpoint: header, records, footer; kraft-dump-log reads it
    with RecordsSnapshotReader(os.path.join(part, name)) as r:
        recs = list(r.metadata_records())
    assert sum(1 for _o, k, _v, _m in recs if k == m.RegisterBrokerRecord.API_KEY) >= 20
    assert recs[0][3].name == "metadata.version"  # features first
    dump = subprocess.run([sys.executable, "-m", "kraft_storage.tools.dump_log", os.path.join(part, name)],
                          capture_output=True, text=True, timeout=60)
    assert dump.returncode == 0 and "SNAPSHOT_FOOTER" in dump.stdout, dump.stderr

    async def second():
        node = KraftNode.from_config(cfg, controller=True)
        await node.start()
        try:
            ctl = node.controller.controller
            deadline = time.monotonic() + 15
            while not (ctl.active and not len(ctl.purgatory) and len(ctl.cluster_control.brokers(
                    epoch=ctl.last_stable_offset)) == 30):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            md = node.metadata
            while len(md.image().cluster.brokers) < 30:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            return _state(ctl), ctl.snapshots_loaded, _image_state(md.image()), md.metrics.handle_load_snapshot_count
        finally:
            await node.shutdown(2.0)

    state2, loaded, image_state2, snapshot_loads = asyncio.run(second())
    assert loaded and loaded[0].offset >= sid.offset  # it started from the snapshot, not from offset 0
    assert state2 == state
    assert image_state2 == image_state
    assert snapshot_loads >= 1  # the loader started from it too
