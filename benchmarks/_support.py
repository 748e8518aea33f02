"""Helpers shared by the multi-process benchmark scripts (raft_tcp_bench, raft_failover_bench,
pysyncobj_bench, raft_vs_pysyncobj): loopback ports, and which code a figure belongs to.

Scripts run as ``python benchmarks/<name>.py``, so this directory is on ``sys.path``.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (all bound at once, then released)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def code_version() -> dict:
    """The commit measured, and which files under kraft_node/ and kraft_storage/ differ from it
    in the work tree (several engineers may edit one tree: a figure belongs to the code that ran)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.exists(os.path.join(repo, ".git")):  # e.g. a `git archive` copy of a commit
        return {"commit": os.environ.get("KRAFT_CODE_COMMIT"), "uncommitted": None, "tree": repo}
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=repo,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "kraft_node", "kraft_storage"],
                               capture_output=True, text=True, cwd=repo, timeout=10).stdout.split("\n")
        return {"commit": head, "uncommitted": [d.strip() for d in dirty if d.strip()]}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "uncommitted": None}


def emit_json(doc: dict, path: str | None) -> None:
    """Print a benchmark's JSON document, and write it to ``path`` when given."""
    text = json.dumps(doc, indent=2)
    print(text)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
