"""Helpers for the start-path tests (no tests here): a node directory written by a real,
cleanly stopped ``kraft-server-start``, byte snapshots of directories, running the CLIs."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO

from kraft_node.server.config import NodeConfig
from kraft_storage.dirlock import LOCK_FILE
from kraft_storage.log.log import CLEAN_SHUTDOWN_FILE
from support.cluster import Node
from support.raft import cluster_properties

ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def snapshot_dir(root) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes), except the lock file: ``.lock``
    is the one file a start (or a refused start) may create or rewrite (it holds the pid)."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name == LOCK_FILE:
                continue
            p = os.path.join(dirpath, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def dir_differences(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    diffs = []
    for k in sorted(set(before) | set(after)):
        if k not in after:
            diffs.append(f"{k}: deleted")
        elif k not in before:
            diffs.append(f"{k}: created ({len(after[k])} bytes)")
        elif before[k] != after[k]:
            a, b = before[k], after[k]
            first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            diffs.append(f"{k}: changed ({len(a)} -> {len(b)} bytes, first difference at {first})")
    return diffs


def run_cli(module: str, *args, timeout=60, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env or ENV)


def run_server(cfg_path: str, *args, timeout=60, env=None) -> subprocess.CompletedProcess:
    return run_cli("kraft_node.server.start", cfg_path, *args, timeout=timeout, env=env)


def stopped_single_voter(base: str, acks: int = 200, extra: dict | None = None) -> tuple[str, list]:
    """A single voter's config whose log was written by a real ``kraft-server-start
    --demo-writer`` (at least ``acks`` acknowledged records) and stopped with SIGTERM, so
    the directory is cleanly closed.  Returns (config path, [(offset, value)] acknowledged)."""
    (path,) = cluster_properties(base, 1, extra=extra)
    node = Node(path, writer=True)
    try:
        node.start()
        deadline = time.monotonic() + 30
        while len(node.acks) < acks:
            assert node.alive, node.stderr()[-3000:]
            assert time.monotonic() < deadline, f"only {len(node.acks)} acks in 30 s\n" + node.stderr()[-3000:]
            time.sleep(0.02)
        node.signal(signal.SIGUSR1)
        time.sleep(0.3)
        assert node.stop() == 0, node.stderr()[-3000:]
    finally:
        node.kill9()
    time.sleep(0.1)  # the reader thread has seen the last ACK lines
    return path, list(node.acks)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """(node dir, acks): one cleanly stopped voter, copied by each test (``node``).  Import
    both fixtures into the test module."""
    base = tmp_path_factory.mktemp("template")
    path, acks = stopped_single_voter(str(base), acks=300)
    return os.path.dirname(path), acks


@pytest.fixture
def node(template, tmp_path):
    """A private copy of the template node: (config path, NodeConfig, acks)."""
    src, acks = template
    dst = tmp_path / "node1"
    shutil.copytree(src, dst)
    cfg_path = dst / "server.properties"
    cfg_path.write_text(cfg_path.read_text().replace(src, str(dst)))
    for name in os.listdir(dst):
        if name.startswith("stderr."):
            os.remove(dst / name)
    cfg = NodeConfig.from_file(str(cfg_path))
    assert os.path.exists(os.path.join(cfg.metadata_partition_dir, CLEAN_SHUTDOWN_FILE))
    return str(cfg_path), cfg, acks
