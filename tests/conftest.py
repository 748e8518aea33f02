"""Shared test fixtures.

The suite runs in whichever mode the process is in (native by default,
pure-Python twins with KRAFT_NO_EXTENSIONS=1; CI runs both).  Tests that
compare the two implementations import both explicitly.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# CI (CI=true) runs hypothesis derandomized: the same examples every run, so a
# landing never depends on luck; developers' runs keep exploring new examples
# (and hypothesis' database replays any failure they find).
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("KRAFT_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "kafka-fixtures"


def fixture_files(*patterns: str) -> list[Path]:
    out: list[Path] = []
    for pat in patterns:
        out.extend(sorted(FIXTURES.glob(f"**/{pat}")))
    return out


def batch_files() -> list[Path]:
    """Every fixture file made of record batches (.log segments and checkpoints)."""
    return fixture_files("*.log", "*.checkpoint")


def pytest_report_header(config):
    from kraft_storage import _accel
    mode = "native" if _accel.WANT_NATIVE else "pure-Python twins (KRAFT_NO_EXTENSIONS)"
    extra = f"; fell back for {sorted(_accel.FALLBACKS)}" if _accel.FALLBACKS else ""
    return f"kraft: {mode}{extra}; fixtures: {FIXTURES if FIXTURES.exists() else 'absent'}"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.exists():
        pytest.fail(f"Kafka fixtures not found at {FIXTURES}; set KRAFT_SHARED to the shared/ folder")
    return FIXTURES
