"""The layer rules, read from the source (issue 20): the tree shows the layers and this
test keeps them.

* ``kraft_node/raft/`` without ``io/`` is the consensus core: a deterministic state machine
  fed by events and a clock.  It imports no I/O or clock module (``asyncio``, ``socket``,
  ``os``, ``time``, ``threading``...), and nothing of the I/O, network or server layers, so
  the same code runs under the simulator and over TCP.
* ``kraft_storage`` knows bytes, files and batches: no networking, no Raft, no kraft_node.
* (Which layer of kraft_node may import which: tests/project/test_house_layers.py.)
* No module imports another package's private module (a module whose name starts with
  ``_``, e.g. ``kraft_storage.messages._runtime``) from outside the package that holds it.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO

PACKAGES = ("kraft_storage", "kraft_node")
CORE_FORBIDDEN = {"asyncio", "socket", "os", "time", "threading", "selectors", "subprocess", "signal",
                  "multiprocessing", "concurrent"}


def _modules():
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join(parts), path


def _imports(name: str, path: Path):
    """(imported module, line) for every import in ``path``, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            yield mod, node.lineno
            for a in node.names:  # `from pkg import _private_module`
                yield f"{mod}.{a.name}", node.lineno


MODULES = dict(_modules())


def _in(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


#: Not the core, though under raft/: the simulator's command-line runner times its seeds
#: with the wall clock (the simulated cluster it drives runs on the virtual clock).
CORE_EXEMPT = {"kraft_node.raft.sim.runner"}


def _is_core(name: str) -> bool:
    return _in(name, "kraft_node.raft") and not _in(name, "kraft_node.raft.io") and name not in CORE_EXEMPT


def test_the_layers_exist():
    for pkg in ("kraft_node.raft", "kraft_node.raft.io", "kraft_node.server", "kraft_node.metadata",
                "kraft_node.broker", "kraft_node.network", "kraft_node.protocol"):
        assert pkg in MODULES, f"{pkg} is missing"


def test_the_raft_core_does_no_io_and_reads_no_clock():
    bad = []
    for name, path in MODULES.items():
        if not _is_core(name):
            continue
        for mod, line in _imports(name, path):
            top = mod.split(".")[0]
            if top in CORE_FORBIDDEN or any(_in(mod, p) for p in (
                    "kraft_node.raft.io", "kraft_node.network", "kraft_node.server", "kraft_node.broker",
                    "kraft_node.metadata")):
                bad.append(f"{path.relative_to(REPO)}:{line} imports {mod}")
    assert not bad, "the Raft core must stay pure:\n" + "\n".join(bad)


def test_storage_knows_nothing_of_the_node():
    bad = [f"{path.relative_to(REPO)}:{line} imports {mod}"
           for name, path in MODULES.items() if _in(name, "kraft_storage")
           for mod, line in _imports(name, path)
           if _in(mod, "kraft_node") or mod.split(".")[0] in ("asyncio", "socket")]
    assert not bad, "\n".join(bad)


def _private_owner(mod: str) -> str | None:
    """The package that owns ``mod`` if ``mod`` is (inside) a private module, else None."""
    parts = mod.split(".")
    for i, p in enumerate(parts):
        if p.startswith("_") and not p.startswith("__") and i > 0:
            return ".".join(parts[:i])
    return None


def test_no_module_imports_another_packages_private_module():
    bad = []
    for name, path in MODULES.items():
        for mod, line in _imports(name, path):
            if mod not in MODULES:  # names imported from a module are not modules
                continue
            owner = _private_owner(mod)
            if owner is not None and not _in(name, owner):
                bad.append(f"{path.relative_to(REPO)}:{line} imports {mod} (private to {owner})")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("src,expect", [
    ("import time\n", "time"), ("from asyncio import Future\n", "asyncio"), ("import os.path\n", "os"),
])
def test_the_core_rule_catches_a_clock_or_io_import(tmp_path, src, expect):
    p = tmp_path / "client.py"
    p.write_text(src)
    assert any(m.split(".")[0] == expect for m, _ in _imports("kraft_node.raft.client", p))


def test_the_private_rule_catches_a_private_import(tmp_path):
    p = tmp_path / "x.py"
    p.write_text("from kraft_storage.messages._runtime import Uuid\nfrom kraft_storage import _accel\n")
    mods = [m for m, _ in _imports("kraft_node.server.x", p)]
    owners = {_private_owner(m) for m in mods} - {None}
    assert owners == {"kraft_storage.messages", "kraft_storage"}
