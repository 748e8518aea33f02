"""Pure-Python twin of ``kraft_storage._native._fdsync``: the same jobs on a worker thread.

Same interface and the same completions as the native AIO version (see its
docstring): a job is a list of descriptors and a token, it completes when every
descriptor has been fdatasync'd, the first error is the job's error, and an
eventfd (``fileno()``) counts completions for an event loop to watch.  The
thread costs a futex wake-up per job and the GIL on the way back, which is what
the native version avoids; this one is the oracle in tests and the fallback
where native AIO is missing (non-Linux, kernels before 4.18, seccomp
profiles that refuse io_setup).
"""
from __future__ import annotations

import os
import queue
import threading

# The one argument check of both twins, in the leaf (the native twin imports it from there too).
from kraft_storage._common import as_fd as _as_fd


class AsyncFdatasync:
    """fdatasync jobs completed on one worker thread."""

    native = False

    def __init__(self, depth: int = 64):
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._done: list = []
        self._lock = threading.Lock()
        self._count = 0  # jobs submitted and not reaped
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="kraft-fdsync", daemon=True)
        self._thread.start()

    def fileno(self) -> int:
        return self._efd

    @property
    def in_flight(self) -> int:
        return self._count

    def submit(self, fds, token) -> None:
        if self._closed:
            raise ValueError("AsyncFdatasync is closed")
        fds = [_as_fd(f) for f in fds]
        self._count += 1
        self._q.put((fds, token))

    def _work(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fds, token = item
            err = None
            for fd in fds:
                try:
                    os.fdatasync(fd)
                except OSError as exc:
                    if err is None:
                        err = OSError(exc.errno, os.strerror(exc.errno), f"fdatasync(fd {fd})")
                except Exception as exc:  # noqa: BLE001 - the worker must outlive any one job
                    if err is None:
                        err = OSError(0, f"fdatasync(fd {fd}) failed: {exc!r}")
            with self._lock:
                self._done.append((token, err))
            os.eventfd_write(self._efd, 1)

    def reap(self) -> list:
        if self._closed:
            return []
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            pass
        with self._lock:
            out, self._done = self._done, []
        self._count -= len(out)
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._q.put(None)
        self._thread.join()
        os.close(self._efd)
        self._done = []
        self._count = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
