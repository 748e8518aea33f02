"""The native build is really what runs (unless the twins were asked for)."""
import importlib
import os
import subprocess
import sys

import pytest
from conftest import REPO

from kraft_storage import accel

# Every Cython module in the tree must be built and have a twin.
NATIVE_MODULES = sorted(p.stem for p in (REPO / "kraft_storage" / "_native").glob("*.pyx"))


def test_every_native_module_has_a_twin():
    twins = REPO / "kraft_storage" / "_pure"
    assert len(NATIVE_MODULES) >= 7
    assert [m for m in NATIVE_MODULES if not (twins / f"{m}.py").exists()] == []


@pytest.mark.parametrize("name", NATIVE_MODULES)
def test_selected_implementation_matches_the_mode(name):
    # A missing extension would silently fall back to the twin and make the
    # native run a second twin run: fail loudly instead.
    importlib.import_module(f"kraft_storage._native.{name}")  # it must be built either way
    if accel.WANT_NATIVE:
        assert accel.load(name).__name__ == f"kraft_storage._native.{name}"
        assert name not in accel.FALLBACKS
    else:
        assert accel.load(name).__name__ == f"kraft_storage._pure.{name}"


def test_env_var_forces_twins():
    code = ("from kraft_storage import accel; from kraft_storage.record import batch; "
            "print(batch._k.__name__, accel.WANT_NATIVE)")
    env = dict(os.environ, KRAFT_NO_EXTENSIONS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["kraft_storage._pure._batch", "False"]
