"""Log-directory locks: Kafka's ``.lock`` file, held for as long as a process writes there.

Kafka's ``LogManager`` takes ``FileChannel.tryLock`` on ``<log dir>/.lock`` in
every log dir before it reads anything, and gives up with "Failed to acquire
lock on file .lock in <dir>. A Kafka instance in another process or thread is
using this directory." when another process holds it.  Without it two nodes
started on the same ``log.dirs`` (configs differing only in the port) both
led, both acknowledged writes, and interleaved them in one segment (issue 19).

Here: ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``<dir>/.lock``.  Why flock and not
``lockf``/``fcntl`` record locks: an flock belongs to the open file description,
so it is released exactly when the descriptor is closed (or the process dies,
kill -9 included) and a second ``open`` in the same process does not silently
share it -- two drivers on one directory in one process conflict too.  Java's
``FileChannel.tryLock`` is an ``fcntl`` lock on Linux, so a JVM and kraft do not
see each other's locks; running both on one directory is not a supported case.

After locking, the holder writes its pid (decimal, newline) into the file, so a
refused process can say who holds it.  Kafka's ``.lock`` is empty; Kafka never
reads it, and its format tool ignores it, so the pid is harmless to Kafka.  The
file stays after release (as Kafka's does): its existence means nothing, only
the lock on it does.  Directory comparisons in the tests treat ``.lock`` as the
one file a start may add or change.

Who locks (every command that writes): ``kraft-server-start`` (every log dir
and the metadata log dir, before meta.properties is read), ``kraft-storage
format`` and ``kraft-storage recover``; read-only tools (``kraft-storage
verify``, ``kraft-dump-log``) do not.
"""
from __future__ import annotations

import errno
import fcntl
import os

from kraft_storage.errors import KraftStorageError

LOCK_FILE = ".lock"

__all__ = ["LOCK_FILE", "DirLockError", "DirLock", "DirLocks", "lock_dirs", "lock_holder"]


class DirLockError(KraftStorageError):
    """A log directory is locked by another process (or cannot be locked at all)."""

    def __init__(self, directory: str, message: str, pid: int | None = None):
        super().__init__(message)
        self.directory = directory
        self.pid = pid


def lock_holder(directory: str) -> int | None:
    """The pid written in ``directory/.lock`` (by its current or last holder), if readable."""
    try:
        with open(os.path.join(directory, LOCK_FILE), "rb") as f:
            text = f.read(32).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class DirLock:
    """An exclusive lock on one directory's ``.lock``; :meth:`release` (or process exit) frees it."""

    def __init__(self, directory: str, fd: int):
        self.directory = directory
        self.path = os.path.join(directory, LOCK_FILE)
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: str) -> "DirLock":
        """Lock ``directory`` (which must exist) or raise :class:`DirLockError` with a one-line
        message naming the directory and, where the file says it, the holder's pid."""
        directory = os.fspath(directory)
        path = os.path.join(directory, LOCK_FILE)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise DirLockError(directory, f"cannot lock log directory {directory}: cannot open {path}: "
                                          f"{exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                pid = lock_holder(directory)
                who = f" (pid {pid})" if pid is not None else ""
                raise DirLockError(directory, f"log directory {directory} is locked by another process{who}: "
                                              "is another kraft node running on it?", pid) from None
            raise DirLockError(directory, f"cannot lock log directory {directory}: {path}: "
                                          f"{exc.strerror or exc}") from None
        try:  # who holds it, for the next process that is refused (best effort: the lock is what counts)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        return cls(directory, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        try:
            self.release()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self):
        return f"DirLock({self.directory!r}, held={self.held})"


class DirLocks:
    """The locks of several directories, taken all or none (see :func:`lock_dirs`)."""

    def __init__(self, locks: list[DirLock]):
        self.locks = locks

    @property
    def directories(self) -> list[str]:
        return [lk.directory for lk in self.locks]

    def release(self) -> None:
        locks, self.locks = self.locks, []
        for lk in reversed(locks):
            lk.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def lock_dirs(directories, *, create: bool = False) -> DirLocks:
    """Lock every directory in ``directories`` (duplicates, by real path, once), in the order
    given.  A directory that does not exist is created when ``create`` (``kraft-storage
    format``), else skipped: there is nothing in it to protect, and a command that needs it
    fails on its own with a better message.  On any failure the locks already taken are
    released and :class:`DirLockError` is raised, so nothing is left half-locked."""
    seen = set()
    locks: list[DirLock] = []
    try:
        for d in directories:
            d = os.fspath(d)
            key = os.path.realpath(d)
            if key in seen:
                continue
            seen.add(key)
            if not os.path.isdir(d):
                if not create:
                    continue
                os.makedirs(d, exist_ok=True)  # (an OSError names the path; the CLIs report it)
            locks.append(DirLock.acquire(d))
    except BaseException:
        for lk in reversed(locks):
            lk.release()
        raise
    return DirLocks(locks)
