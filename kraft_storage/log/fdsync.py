"""Background fdatasync for a single-threaded event loop.

:func:`open_async_fdatasync` returns a flusher with this interface (both
implementations, ``kraft_storage._native._fdsync`` on Linux native AIO and its
thread-based twin ``kraft_storage._pure._fdsync``, keep it)::

    f.submit(fds, token)   # start fdatasync of each descriptor; never blocks
    f.fileno()             # an eventfd: readable when reap() has something
    f.reap()               # [(token, OSError | None), ...] of finished jobs
    f.in_flight            # jobs submitted and not yet reaped
    f.close()              # waits for the fsyncs in flight

Why: the Raft leader's log fsync (0.1-0.4 ms here) should not stop its loop
from answering Fetches, and handing it to a Python thread costs a futex wake-up
and two GIL hand-offs per flush (BENCHMARKS.md, sessions 4 and 7).  The
descriptors must stay open until their job is reaped (``FlushJob.fds`` /
``FlushJob.finish`` in :mod:`kraft_storage.log.log` are made for this).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, cast

from kraft_storage import accel

if TYPE_CHECKING:
    from kraft_storage._contracts import AsyncFdatasyncLike, FdsyncKernel

_impl = cast("FdsyncKernel", accel.load("_fdsync"))

#: Why the native flusher could not be used in this process, if it could not.
FALLBACK_REASON: str | None = None


_native_ok: bool | None = None


def native_aio_available() -> bool:
    """Whether :func:`open_async_fdatasync` gives the native AIO flusher in this process
    (native code in use, and the kernel grants an AIO context).  Probed once."""
    global _native_ok, FALLBACK_REASON
    if _native_ok is None:
        if not getattr(_impl, "__name__", "").startswith("kraft_storage._native"):
            _native_ok = False
        else:
            try:
                _impl.AsyncFdatasync(1).close()
                _native_ok = True
            except OSError as exc:
                FALLBACK_REASON = f"native AIO unavailable: {exc}"
                _native_ok = False
    return _native_ok


def open_async_fdatasync(depth: int = 64) -> AsyncFdatasyncLike:
    """A native AIO flusher when this process uses native code and the kernel lets it
    (``io_setup`` may be refused: old kernels, seccomp), else the thread-based twin."""
    global FALLBACK_REASON
    if getattr(_impl, "__name__", "").startswith("kraft_storage._native"):
        try:
            return _impl.AsyncFdatasync(depth)
        except OSError as exc:
            FALLBACK_REASON = f"native AIO unavailable: {exc}"
            # the kernel refused an AIO context: the thread twin, through the one chooser
            return cast("FdsyncKernel", accel.twin("_fdsync")).AsyncFdatasync(depth)
    return _impl.AsyncFdatasync(depth)
