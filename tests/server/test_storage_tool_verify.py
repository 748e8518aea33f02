"""``kraft-storage verify`` / ``recover`` and the load report a node logs at start (issue 19,
Deliver 3): recovery is loud, verify is read-only, recover is explicit and locked."""
from __future__ import annotations

import os

import support.server as server_support
from support.server import dir_differences, run_cli, run_server, snapshot_dir

from kraft_storage.dirlock import DirLock
from kraft_storage.log.log import CLEAN_SHUTDOWN_FILE
from kraft_storage.record import scan_batches

# support.server's fixtures (``template``: one cleanly stopped voter; ``node``: a private copy
# of it), bound by name so pytest finds them here; imported with ``from``, each test's ``node``
# parameter would shadow the import (F811).
node, template = server_support.node, server_support.template

STORAGE = "kraft_node.server.tools.storage"


def _segment(cfg) -> str:
    d = cfg.metadata_partition_dir
    (seg,) = [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.endswith(".log")]
    return seg


def _flip_middle(seg: str) -> int:
    """Flip one byte inside the middle batch; returns that batch's base offset."""
    data = bytearray(open(seg, "rb").read())
    h = scan_batches(bytes(data)).headers
    mid = len(h) // 2
    data[int(h["position"][mid]) + int(h["size"][mid]) // 2] ^= 0xFF
    with open(seg, "wb") as f:
        f.write(data)
    return int(h["base_offset"][mid])


def test_help_lists_the_commands_that_exist():
    r = run_cli(STORAGE, "--help")
    assert r.returncode == 0
    assert "inspect" not in r.stdout  # it promised a command that did not exist
    for cmd in ("random-uuid", "format", "verify", "recover"):
        assert cmd in r.stdout


def test_verify_a_sound_log(node):
    cfg_path, cfg, _ = node
    before = snapshot_dir(cfg.metadata_log_dir)
    for args in (("-c", cfg_path), ("--dir", cfg.metadata_partition_dir)):
        r = run_cli(STORAGE, "verify", *args)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.startswith(cfg.metadata_partition_dir), r.stdout
    assert dir_differences(before, snapshot_dir(cfg.metadata_log_dir)) == []


def test_verify_finds_a_flipped_byte_and_changes_nothing_then_recover_drops_loudly(node):
    cfg_path, cfg, _ = node
    seg = _segment(cfg)
    bad = _flip_middle(seg)
    before = snapshot_dir(cfg.metadata_log_dir)
    r = run_cli(STORAGE, "verify", "--dir", cfg.metadata_partition_dir)
    assert r.returncode == 1, r.stdout + r.stderr
    assert os.path.basename(seg) in r.stdout and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert dir_differences(before, snapshot_dir(cfg.metadata_log_dir)) == []  # read-only
    # recover is refused while something holds the lock, and changes nothing
    held = DirLock.acquire(cfg.metadata_log_dir)
    try:
        r = run_cli(STORAGE, "recover", "-c", cfg_path)
    finally:
        held.release()
    assert r.returncode == 1 and "is locked by another process" in r.stderr, r.stderr
    assert dir_differences(before, snapshot_dir(cfg.metadata_log_dir)) == []
    # recover truncates explicitly and says what it dropped
    r = run_cli(STORAGE, "recover", "-c", cfg_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert str(bad) in r.stdout and "bytes" in r.stdout, r.stdout
    assert r.stderr == ""  # the report is the output (stdout), not repeated as log lines
    assert all(ln.startswith(cfg.metadata_partition_dir + ":") for ln in r.stdout.splitlines()), r.stdout
    assert os.path.getsize(seg) < len(before[os.path.relpath(seg, cfg.metadata_log_dir)])
    assert os.path.exists(os.path.join(cfg.metadata_partition_dir, CLEAN_SHUTDOWN_FILE))
    r = run_cli(STORAGE, "verify", "-c", cfg_path)
    assert r.returncode == 0, r.stdout
    r = run_server(cfg_path, "--exit-after-seconds", "0.5")  # the node starts on what is left
    assert r.returncode == 0, r.stderr


def test_verify_and_recover_need_a_target():
    r = run_cli(STORAGE, "verify")
    assert r.returncode == 2 and "--config" in r.stderr


def test_the_node_logs_its_load_report(node):
    """A clean start logs the summary at INFO; a start that had to cut a torn tail logs
    the summary and every drop at WARNING, with the directory and byte counts."""
    cfg_path, cfg, _ = node
    r = run_server(cfg_path, "--exit-after-seconds", "0.3")
    assert r.returncode == 0, r.stderr
    info = [ln for ln in r.stderr.splitlines() if "INFO" in ln and "log loaded after a clean shutdown" in ln]
    assert len(info) == 1 and cfg.metadata_partition_dir in info[0], r.stderr
    assert " WARNING " not in r.stderr, r.stderr
    # a crash that left a torn tail: no marker, garbage after the last batch
    os.remove(os.path.join(cfg.metadata_partition_dir, CLEAN_SHUTDOWN_FILE))
    seg = _segment(cfg)
    with open(seg, "ab") as f:
        f.write(b"\x00\x01torn" * 20)
    r = run_server(cfg_path, "--exit-after-seconds", "0.3")
    assert r.returncode == 0, r.stderr
    warn = [ln for ln in r.stderr.splitlines() if " WARNING " in ln]
    assert any("unclean shutdown" in ln and "DROPPED 120 bytes" in ln for ln in warn), r.stderr
    assert any(os.path.basename(seg) in ln for ln in warn), r.stderr
