"""The README's test command is what CI runs (.ci/run), verbatim; the pure pass's deselection
names only tests that exist (a renamed file must not silently leave both passes)."""
from __future__ import annotations

import re

from conftest import NATIVE_PASS_ONLY, REPO


def test_ci_runs_the_readme_test_command_verbatim():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"Pass the tests.*?```sh\n(.*?)\n```", readme, re.S)
    assert block, "README.md has no 'Pass the tests' sh block"
    command = block.group(1).strip()
    assert "python -m pytest" in command
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert any(line.startswith(command) for line in ci.splitlines()), (command, ci)


def test_native_pass_only_entries_exist():
    for entry in NATIVE_PASS_ONLY:
        path, _, name = entry.partition("::")
        target = REPO / path
        assert target.exists(), f"{entry}: no such test file or folder"
        if name:
            assert f"def {name}(" in target.read_text(encoding="utf-8"), f"{entry}: no such test"
