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


#: The one parameter of a parametrization whose fixture files are missing: a test run
#: with it fails at setup (pytest_runtest_setup below), so a machine without the Kafka
#: fixtures fails loudly instead of collecting nothing.  A string, compared by value, so
#: the check holds however a module reaches this file (pytest loads it as a plugin and tests
#: import it as ``conftest``: two module objects).
MISSING_FIXTURES = "kafka-fixtures-missing"


def fixture_params(*patterns: str) -> list:
    """``fixture_files(*patterns)`` for ``pytest.mark.parametrize``: never empty."""
    return fixture_files(*patterns) or [pytest.param(MISSING_FIXTURES, id=MISSING_FIXTURES)]


def batch_files() -> list[Path]:
    """Every fixture file made of record batches (.log segments and checkpoints)."""
    return fixture_files("*.log", "*.checkpoint")


def batch_params() -> list:
    """``batch_files()`` for ``pytest.mark.parametrize``: never empty."""
    return fixture_params("*.log", "*.checkpoint")


#: Tests the pure-Python pass (``KRAFT_NO_EXTENSIONS=1 python -m pytest -m "not native_pass"``, the
#: README's test command) leaves to the native pass: they run the same Python code as tests that
#: do run in both passes, and are slow for reasons that have nothing to do with the twins --
#: clusters of processes over TCP (each node a fresh interpreter, waiting on real timeouts), Spark
#: (a JVM), and the simulators' seed sweeps (hundreds of seeds of the Raft and controller cores,
#: which call no kernel the pure pass swaps that the in-process tests do not already cover in both
#: modes).  The twins are each checked against their kernel directly (tests named *twin* /
#: *_pure / *kernels*), and every other test runs in both passes.  Decision recorded in
#: .ci/run; it keeps CI near 35 minutes instead of 50.
NATIVE_PASS_ONLY = (
    "tests/cluster/",
    "tests/spark/",
    "tests/broker/test_broker_cluster.py",
    "tests/broker/test_broker_chaos.py",
    "tests/broker/test_partitions_cluster.py",
    "tests/broker/test_partitions_chaos.py",
    "tests/raft/test_raft_sim.py::test_simulation_seeds_keep_invariants_and_converge",
    "tests/metadata/test_controller_sim.py::test_chaos_seeds_keep_the_controller_invariants_and_converge",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        nodeid = item.nodeid.replace("\\", "/")
        if any(nodeid.startswith(p) or nodeid.startswith(p.replace("tests/", "", 1)) for p in NATIVE_PASS_ONLY):
            item.add_marker(pytest.mark.native_pass)


def pytest_runtest_setup(item):
    callspec = getattr(item, "callspec", None)
    if callspec is not None and any(isinstance(v, str) and v == MISSING_FIXTURES
                                    for v in callspec.params.values()):
        pytest.fail(f"Kafka fixtures not found under {FIXTURES} for {item.name}; "
                    "set KRAFT_SHARED to the shared/ folder", pytrace=False)


def pytest_report_header(config):
    from kraft_storage import accel
    mode = "native" if accel.WANT_NATIVE else "pure-Python twins (KRAFT_NO_EXTENSIONS)"
    extra = f"; fell back for {sorted(accel.FALLBACKS)}" if accel.FALLBACKS else ""
    return f"kraft: {mode}{extra}; fixtures: {FIXTURES if FIXTURES.exists() else 'absent'}"


def require_fixtures() -> Path:
    """The fixtures folder, or a test failure saying where it was looked for."""
    if not FIXTURES.is_dir():
        pytest.fail(f"Kafka fixtures not found at {FIXTURES}; set KRAFT_SHARED to the shared/ folder",
                    pytrace=False)
    return FIXTURES


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return require_fixtures()
