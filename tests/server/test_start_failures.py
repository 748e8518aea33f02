"""A failed start leaves the directory as it found it (issue 19, Deliver 2).

Each test starts ``kraft-server-start`` in a subprocess on a directory written by a real,
cleanly stopped single voter, makes the start fail (port in use, a bad quorum-state, a bad
leader-epoch checkpoint, a CRC mismatch in the clean log, a bad meta.properties), and checks
that every file's bytes are as before -- the clean-shutdown marker kept, the indexes trimmed
as on a clean close -- except ``.lock``.  Before the fix, a start that failed after the log
was opened deleted ``.kafka_cleanshutdown`` and left the indexes preallocated to 10 MiB, and
the next start then cut the log without a word.
"""
from __future__ import annotations

import os
import socket

import pytest
import support.server as server_support
from support.server import dir_differences, run_server, snapshot_dir

from kraft_node.server.config import NodeConfig
from kraft_storage.record import scan_batches

# support.server's fixtures (``template``: one cleanly stopped voter; ``node``: a private copy
# of it), bound by name so pytest finds them here; imported with ``from``, each test's ``node``
# parameter would shadow the import (F811).
node, template = server_support.node, server_support.template


def _error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("kraft-server-start:")]


def _fails_and_changes_nothing(cfg_path: str, cfg: NodeConfig, must_say: str) -> str:
    before = snapshot_dir(cfg.metadata_log_dir)
    r = run_server(cfg_path, "--exit-after-seconds", "5", timeout=60)
    assert r.returncode != 0, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = _error_lines(r.stderr)
    assert len(lines) == 1 and must_say in lines[0], r.stderr
    assert dir_differences(before, snapshot_dir(cfg.metadata_log_dir)) == []
    return lines[0]


def _segment(cfg: NodeConfig) -> str:
    d = cfg.metadata_partition_dir
    (seg,) = [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.endswith(".log")]
    return seg


def test_port_in_use(node):
    cfg_path, cfg, _ = node
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", cfg.controller_endpoint.port))
        s.listen(1)
        _fails_and_changes_nothing(cfg_path, cfg, str(cfg.controller_endpoint.port))
    finally:
        s.close()
    r = run_server(cfg_path, "--exit-after-seconds", "0.5")  # and the node still starts
    assert r.returncode == 0, r.stderr


def test_bad_quorum_state(node):
    cfg_path, cfg, _ = node
    with open(os.path.join(cfg.metadata_partition_dir, "quorum-state"), "w") as f:
        f.write('{"leaderId": "one"}')
    _fails_and_changes_nothing(cfg_path, cfg, "quorum-state")


def test_bad_leader_epoch_checkpoint(node):
    cfg_path, cfg, _ = node
    with open(os.path.join(cfg.metadata_partition_dir, "leader-epoch-checkpoint"), "w") as f:
        f.write("0\n2\n1 0\nthree 5\n")
    _fails_and_changes_nothing(cfg_path, cfg, "leader-epoch-checkpoint")


def test_bad_meta_properties(node):
    cfg_path, cfg, _ = node
    p = os.path.join(cfg.metadata_log_dir, "meta.properties")
    text = open(p).read()
    cid = next(ln.split("=", 1)[1] for ln in text.splitlines() if ln.startswith("cluster.id="))
    with open(p, "w") as f:
        f.write(text.replace(cid, "garbage!"))
    line = _fails_and_changes_nothing(cfg_path, cfg, "garbage!")
    assert p in line


def test_flipped_byte_in_a_clean_segment_is_refused_twice_and_nothing_is_dropped(node):
    """The issue's repro: stop a single voter cleanly, flip one byte in the middle of its
    segment, start it twice.  Before: the first start refused with a CRC error, the second
    exited 0 having cut the log at the corruption, logging nothing.  Now both refuse with
    the same error, and every acknowledged record is still in the segment."""
    cfg_path, cfg, acks = node
    seg = _segment(cfg)
    data = bytearray(open(seg, "rb").read())
    h = scan_batches(bytes(data)).headers
    mid = len(h) // 2
    pos = int(h["position"][mid]) + int(h["size"][mid]) // 2  # inside a batch's records
    data[pos] ^= 0xFF
    with open(seg, "wb") as f:
        f.write(data)
    first = _fails_and_changes_nothing(cfg_path, cfg, os.path.basename(seg))
    second = _fails_and_changes_nothing(cfg_path, cfg, os.path.basename(seg))
    assert first == second
    assert "corrupt" in first.lower() and "kraft-storage recover" in first, first
    # nothing was dropped: every acknowledged value is still in the segment's bytes
    raw = open(seg, "rb").read()
    assert raw == bytes(data)
    values = [v for _, v in acks]
    assert values and all(v.encode() in raw for v in values[: len(values) // 4])


def test_in_process_node_closes_what_a_failed_start_opened(node):
    """KraftNode itself (not only kraft-server-start) closes the log and releases its locks
    when start() fails, here on a port in use."""
    import asyncio

    from kraft_node.server.node import KraftNode
    from kraft_storage.dirlock import DirLock
    cfg_path, cfg, _ = node
    before = snapshot_dir(cfg.metadata_log_dir)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", cfg.controller_endpoint.port))
        s.listen(1)

        async def go():
            n = KraftNode.from_config(NodeConfig.from_file(cfg_path))
            with pytest.raises(OSError):
                await n.start()
        asyncio.run(asyncio.wait_for(go(), 30))
    finally:
        s.close()
    assert dir_differences(before, snapshot_dir(cfg.metadata_log_dir)) == []
    DirLock.acquire(cfg.metadata_log_dir).release()  # the node's locks were released
