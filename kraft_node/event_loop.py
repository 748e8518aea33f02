"""Which event loop kraft's processes run on: uvloop when it is installed, else asyncio's own.

Why: a Raft commit is a chain of small messages between processes (Fetch answer,
follower append + fsync, next Fetch, high-watermark update), so the per-wake-up
cost of the event loop is a large part of commit latency.  uvloop (libuv, the
loop asyncpg and many servers run on) does the same wake-ups and socket
callbacks for a fraction of the CPU of the pure-Python selector loop.

The choice is made once per process, like the native/pure choice in
:mod:`kraft_storage.accel`: ``KRAFT_EVENT_LOOP=asyncio`` forces the standard loop
(for A/B measurements, or if uvloop misbehaves on some platform),
``KRAFT_EVENT_LOOP=uvloop`` insists on uvloop and fails if it is missing; unset
means "uvloop if importable".  Nothing in kraft depends on which loop runs: both
are tested (CI runs the TCP tests on the default, the unit tests on asyncio's).
"""
from __future__ import annotations

import asyncio
import os
from typing import Any, Callable, Coroutine

_CHOICE = os.environ.get("KRAFT_EVENT_LOOP", "").strip().lower()
if _CHOICE not in ("", "asyncio", "uvloop"):
    raise ImportError(f"KRAFT_EVENT_LOOP={_CHOICE!r}: expected 'asyncio' or 'uvloop'")

_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
if _CHOICE != "asyncio":
    try:
        import uvloop as _uvloop
        _factory = _uvloop.new_event_loop
    except ImportError:
        if _CHOICE == "uvloop":
            raise
        _factory = None

#: "uvloop" or "asyncio": the loop :func:`run` uses in this process.
EVENT_LOOP = "uvloop" if _factory is not None else "asyncio"


def run(main: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run(main)`` on the chosen loop."""
    if _factory is None:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=_factory) as runner:
        return runner.run(main)
