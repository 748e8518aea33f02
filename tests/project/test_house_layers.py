"""The folders are layers, and a layer imports only downwards (issue 20, Deliver 1).

* ``kraft_node/raft/`` (the pure core) never imports its I/O layer, the network or the node;
* ``kraft_node/raft/io/`` never imports the node (the node builds the driver, not the reverse);
* ``kraft_node/metadata/`` never imports the I/O layer, the network or the node: it reaches
  the quorum through the Raft API;
* ``kraft_node/broker/`` never imports the I/O layer or the node (``kraft_node/server/``
  assembles the broker, not the reverse); it speaks Kafka's wire protocol, so it may use
  ``kraft_node/network/`` (the listener's handler contract, the client, the Envelope codec).

Checked on the source (every ``import``/``from ... import``, at any depth, so a lazy import
inside a function counts too).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO

ROOT = REPO / "kraft_node"

IO, NETWORK, SERVER = "kraft_node.raft.io", "kraft_node.network", "kraft_node.server"

#: (package, its files, the packages it must not import)
RULES = [
    ("kraft_node.raft", [p for p in (ROOT / "raft").rglob("*.py") if (ROOT / "raft" / "io") not in p.parents],
     (IO, NETWORK, SERVER)),
    ("kraft_node.raft.io", list((ROOT / "raft" / "io").rglob("*.py")), (SERVER,)),
    ("kraft_node.metadata", list((ROOT / "metadata").rglob("*.py")), (IO, NETWORK, SERVER)),
    ("kraft_node.broker", list((ROOT / "broker").rglob("*.py")), (IO, SERVER)),
]


def _imports(path: Path) -> list[str]:
    mod = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    return _imports_in(path.read_text(), pkg)


def _imports_in(source: str, pkg: str) -> list[str]:
    """Every module name ``source`` (a module of package ``pkg``) imports."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append(name)
            out.extend(f"{name}.{a.name}" for a in node.names)  # "from kraft_node.raft import io"
    return out


@pytest.mark.parametrize("package,files,forbidden", RULES, ids=[r[0] for r in RULES])
def test_a_layer_imports_only_downwards(package, files, forbidden):
    assert files, f"{package} has no source files: the layer's folder moved?"
    bad = [(str(p.relative_to(ROOT.parent)), name) for p in files for name in _imports(p)
           if any(name == f or name.startswith(f + ".") for f in forbidden)]
    assert bad == []


def test_the_checker_sees_a_forbidden_import():
    """The scan itself: absolute, relative and function-level imports are all found."""
    names = _imports_in("def f():\n    from .io import driver\n    import kraft_node.server.node\n"
                        "from . import io\n", "kraft_node.raft")
    assert "kraft_node.raft.io" in names and "kraft_node.server.node" in names
    assert names.count("kraft_node.raft.io") == 2  # "from .io import driver" and "from . import io"
