"""Import-time choice between a native kernel and its pure-Python twin.

Rule: the native extension is used when it was built and importable, unless
``KRAFT_NO_EXTENSIONS`` is set to a true value (``1``, ``true``, ``yes``), in
which case every module uses its twin.  The choice is made once per process so
that a process never mixes the two (their results are identical by test, but
mixing would make performance and bugs hard to reason about).

``NATIVE`` tells which world this process is in.  ``load(name)`` returns the
module ``kraft_storage._native.<name>`` or ``kraft_storage._pure.<name>``.
If native is wanted but one extension fails to import (e.g. a source checkout
that was never built) we fall back to the twin and record why in
``FALLBACKS``; ``kraft_storage.tools`` and the test-suite report it.

This is the one chooser (public: the facades, ``kraft_node`` and the tests use
it).  No module imports ``kraft_storage._native.X`` or ``kraft_storage._pure.X``
itself to pick an implementation.  The one run-time fallback, a native object
that cannot be made in this process after its module imported (the ``_fdsync``
AIO context refused by the kernel), also asks here: :func:`twin`.
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType

_FALSE = {"", "0", "false", "no", "off"}

#: True unless KRAFT_NO_EXTENSIONS asks for the pure-Python twins.
WANT_NATIVE: bool = os.environ.get("KRAFT_NO_EXTENSIONS", "").strip().lower() in _FALSE

#: module name -> reason the native module could not be used.
FALLBACKS: dict[str, str] = {}


def load(name: str, package: str = "kraft_storage") -> ModuleType:
    """Return the implementation module for kernel ``name``: ``<package>._native.<name>``
    or ``<package>._pure.<name>`` (``kraft_node`` has its own, for the RPC codecs)."""
    if WANT_NATIVE:
        try:
            return importlib.import_module(f"{package}._native.{name}")
        except ImportError as exc:  # not built: use the twin, remember why
            FALLBACKS[name] = f"{type(exc).__name__}: {exc}"
    return importlib.import_module(f"{package}._pure.{name}")


def twin(name: str, package: str = "kraft_storage") -> ModuleType:
    """The pure-Python twin ``<package>._pure.<name>``, for a caller whose native object
    could not be made at run time although its module imported (``kraft_storage.log.fdsync``:
    ``io_setup`` refused).  The process keeps its choice for every other kernel."""
    return importlib.import_module(f"{package}._pure.{name}")


def native_available(name: str, package: str = "kraft_storage") -> bool:
    """True when ``<package>._native.<name>`` imports (whatever WANT_NATIVE says)."""
    try:
        importlib.import_module(f"{package}._native.{name}")
        return True
    except ImportError:
        return False


#: Kept for callers that only want to know the mode of the process.
NATIVE: bool = WANT_NATIVE
