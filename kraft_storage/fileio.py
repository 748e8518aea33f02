"""Durable file-system steps, the way Kafka writes its state files: the one home of
``fsync_dir`` and ``atomic_write``.

Every small state file (``meta.properties``, ``quorum-state``,
``leader-epoch-checkpoint``, ``partition.metadata``) is replaced with
:func:`atomic_write`: write ``path + tmp_suffix``, fsync the file, rename it over
``path`` (atomic on POSIX), then fsync the directory so that the rename itself
survives a crash (Kafka's ``Utils.atomicMoveWithFallback`` with its parent
flush).  A reader therefore sees the old file or the new one, never a torn one.
Snapshots and segments are written by their own writers but make their renames
and deletions durable with the same :func:`fsync_dir`.

Errors name the path: a full device is a :class:`~kraft_storage.errors.DiskFullError`
(one line, for a fail-stop); any other ``OSError`` carries the file name.  A
failed write removes its temp file and leaves ``path`` as it was.

A leaf-level module: it imports only the standard library and
:mod:`kraft_storage.errors`, so every layer (log, snapshot, messages, the Raft
I/O layer) can use it.
"""
from __future__ import annotations

import errno
import os
from typing import TypeAlias

from kraft_storage.errors import DiskFullError

__all__ = ["fsync_dir", "atomic_write", "disk_full"]

StrPath: TypeAlias = "str | os.PathLike[str]"


def disk_full(exc: BaseException, path: StrPath, what: str) -> DiskFullError | None:
    """The :class:`DiskFullError` for an ENOSPC/EDQUOT ``exc`` while ``what`` on ``path``, else None."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFullError(path, what, exc.errno)
    return None


def _named(exc: OSError, path: StrPath) -> OSError:
    """``exc`` itself when it names a file, else the same error (same class) naming ``path``."""
    if exc.filename is not None or exc.errno is None:
        return exc
    return type(exc)(exc.errno, exc.strerror, os.fspath(path))


def fsync_dir(directory: StrPath) -> None:
    """Make a directory's entries (files created, renamed, deleted in it) durable.

    Raises ``OSError`` naming ``directory`` when it cannot be opened or synced:
    a rename that may not survive a crash is not reported as done."""
    path = os.fspath(directory) or "."
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        raise _named(exc, path) from None
    finally:
        os.close(fd)


def atomic_write(path: StrPath, data: bytes | str, *, sync: bool = True, tmp_suffix: str = ".tmp") -> None:
    """Replace ``path`` with ``data`` (``str`` is written as UTF-8): temp file, fsync,
    rename, fsync the directory.  ``sync=False`` skips both fsyncs (tests, tools on
    scratch copies): the rename is still atomic, only its durability is given up."""
    path = os.fspath(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = path + tmp_suffix
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            view = memoryview(raw).cast("B")
            while view:
                view = view[os.write(fd, view):]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        err = disk_full(exc, path, "writing")
        if err is not None:
            raise err from exc
        if isinstance(exc, OSError):
            named = _named(exc, tmp)
            if named is not exc:
                raise named from exc
        raise
    if sync:
        fsync_dir(os.path.dirname(os.path.abspath(path)))
