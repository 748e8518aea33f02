"""Durable small-file writes, the way Kafka writes its state files.

``atomic_write``: write ``path + tmp_suffix``, flush, fsync the file, rename it
over ``path`` (atomic on POSIX), then fsync the directory so the rename itself
survives a crash.  A reader therefore sees either the old or the new file,
never a torn one.  Used for meta.properties, quorum-state and checkpoints.
"""
from __future__ import annotations

import os


def fsync_dir(directory: str) -> None:
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, *, fsync: bool = True, tmp_suffix: str = ".tmp") -> None:
    tmp = path + tmp_suffix
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if fsync:
        fsync_dir(os.path.dirname(os.path.abspath(path)))
