# cython: language_level=3
"""Asynchronous fdatasync on Linux native AIO (C in ``csrc/aio_fsync.c``).

Twin: ``kraft_storage/_pure/_fdsync.py`` (a worker thread, same interface and
the same completions).  The facade is :mod:`kraft_storage.log.fdsync`.

One *job* is a list of descriptors and a token; each descriptor becomes one
IOCB_CMD_FDSYNC request tagged with the job's id, and the job completes when
its last request does.  A request the kernel refuses to queue (``EINVAL``: a
file system without asynchronous fsync; ``EAGAIN``: the context is full) is
done synchronously instead, so a job always completes; any other error (a bad
descriptor) becomes the job's error.  Completions are counted on an eventfd
(``fileno()``), which an event loop watches with ``add_reader``.
"""
from libc.errno cimport EINVAL, EAGAIN
from libc.stdint cimport uint64_t, int64_t
from posix.unistd cimport read, write, close as c_close

import os

from kraft_storage._common import as_fd as _as_fd  # (one argument check for both twins)

cdef extern from "aio_fsync.h" nogil:
    ctypedef struct kraft_aio_completion:
        uint64_t tag
        int64_t res
    int kraft_aio_setup(unsigned depth, uint64_t *ctx)
    int kraft_aio_submit_fdsync(uint64_t ctx, int fd, int efd, uint64_t tag)
    int kraft_aio_reap(uint64_t ctx, kraft_aio_completion *out, int max)
    int kraft_aio_destroy(uint64_t ctx)

cdef extern from "unistd.h" nogil:
    int fdatasync(int fd)

cdef extern from "errno.h":
    int errno


cdef object _oserror(int err, str what):
    return OSError(err, os.strerror(err), what)


cdef class AsyncFdatasync:
    """fdatasync jobs completed in the background; see the module docstring."""

    cdef uint64_t _ctx
    cdef int _efd
    cdef bint _closed
    cdef uint64_t _next
    #: job id -> [token, requests still in flight, first error or None]
    cdef dict _jobs
    #: (token, error) of jobs finished at submission, not yet reaped
    cdef list _ready

    def __cinit__(self):
        self._efd = -1
        self._closed = True

    def __init__(self, unsigned depth=64):
        cdef uint64_t ctx = 0
        cdef int r = kraft_aio_setup(depth, &ctx)
        if r < 0:
            raise _oserror(-r, "io_setup")
        self._ctx = ctx
        try:
            self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except BaseException:
            kraft_aio_destroy(ctx)
            raise
        self._closed = False
        self._next = 1
        self._jobs = {}
        self._ready = []

    native = True

    def fileno(self):
        """The eventfd that turns readable when :meth:`reap` has something to return."""
        return self._efd

    @property
    def in_flight(self):
        """Jobs submitted and not yet returned by :meth:`reap`."""
        return len(self._jobs) + len(self._ready)

    def submit(self, fds, token):
        """Start ``fdatasync`` of every descriptor in ``fds``; ``token`` comes back from
        :meth:`reap` once all are done.  The descriptors must stay open until then."""
        if self._closed:
            raise ValueError("AsyncFdatasync is closed")
        fds = [_as_fd(f) for f in fds]  # (all checked before any request is queued)
        cdef uint64_t tag = self._next
        cdef int fd, r
        cdef int queued = 0
        err = None
        self._next += 1
        for f in fds:
            fd = f
            r = kraft_aio_submit_fdsync(self._ctx, fd, self._efd, tag)
            if r == 0:
                queued += 1
                continue
            if r == -EINVAL or r == -EAGAIN:  # cannot queue it: do it now
                with nogil:
                    r = fdatasync(fd)
                if r < 0:
                    r = -errno
            if r < 0 and err is None:
                err = _oserror(-r, f"fdatasync(fd {fd})")
        if queued:
            self._jobs[tag] = [token, queued, err]
        else:
            self._ready.append((token, err))
            self._signal()

    cdef void _signal(self):
        cdef uint64_t one = 1
        write(self._efd, &one, 8)

    def reap(self):
        """The jobs finished since the last call, as ``(token, OSError or None)``, in
        completion order.  Never blocks."""
        if self._closed:
            return []
        cdef uint64_t count
        cdef kraft_aio_completion ev[64]
        cdef int n, i
        read(self._efd, &count, 8)  # reset the eventfd (EAGAIN when already zero: fine)
        out = self._ready
        self._ready = []
        while True:
            n = kraft_aio_reap(self._ctx, ev, 64)
            if n < 0:
                raise _oserror(-n, "io_getevents")
            for i in range(n):
                job = self._jobs.get(ev[i].tag)
                if job is None:
                    continue
                if ev[i].res < 0 and job[2] is None:
                    job[2] = _oserror(<int>-ev[i].res, "fdatasync")
                job[1] -= 1
                if job[1] == 0:
                    del self._jobs[ev[i].tag]
                    out.append((job[0], job[2]))
            if n < 64:
                break
        return out

    def close(self):
        """Wait for the requests in flight (the kernel does), then release the context and
        the eventfd.  Jobs not reaped are dropped.  Idempotent."""
        if self._closed:
            return
        self._closed = True
        with nogil:
            kraft_aio_destroy(self._ctx)
        c_close(self._efd)
        self._efd = -1
        self._jobs = {}
        self._ready = []

    def __dealloc__(self):
        if not self._closed:
            kraft_aio_destroy(self._ctx)
            if self._efd >= 0:
                c_close(self._efd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
