"""kraft_storage.fileio: the one fsync_dir and the one atomic_write keep Kafka's durability
(fsync the file, rename, fsync the directory) and name the path in every error."""
from __future__ import annotations

import errno
import os
import pathlib
import re

import pytest

from kraft_storage import fileio
from kraft_storage.errors import DiskFullError
from kraft_storage.fileio import atomic_write, fsync_dir


def _record_steps(monkeypatch) -> list[tuple]:
    """Record the fsyncs (by the path of the descriptor) and renames atomic_write makes."""
    steps: list[tuple] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        steps.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst):
        steps.append(("replace", os.fspath(src), os.fspath(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(fileio.os, "fsync", fsync)
    monkeypatch.setattr(fileio.os, "replace", replace)
    return steps


def test_atomic_write_fsyncs_the_file_renames_then_fsyncs_the_directory(tmp_path, monkeypatch):
    target = tmp_path / "quorum-state"
    target.write_bytes(b"old")
    steps = _record_steps(monkeypatch)
    atomic_write(target, b"new")
    tmp = str(target) + ".tmp"
    assert steps == [("fsync", tmp), ("replace", tmp, str(target)), ("fsync", str(tmp_path))]
    assert target.read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == ["quorum-state"]


def test_atomic_write_without_sync_still_renames(tmp_path, monkeypatch):
    steps = _record_steps(monkeypatch)
    atomic_write(str(tmp_path / "f"), "é", sync=False, tmp_suffix=".part")
    assert steps == [("replace", str(tmp_path / "f.part"), str(tmp_path / "f"))]
    assert (tmp_path / "f").read_bytes() == "é".encode()


def test_a_failed_write_names_the_file_removes_the_temp_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    target = tmp_path / "meta.properties"
    target.write_bytes(b"old")

    def write(fd, data):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(fileio.os, "write", write)
    with pytest.raises(OSError) as ei:
        atomic_write(target, b"new")
    assert ei.value.errno == errno.EIO and ei.value.filename == str(target) + ".tmp"
    assert str(target) in str(ei.value)
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["meta.properties"]


def test_a_full_device_is_a_disk_full_error_naming_the_file(tmp_path, monkeypatch):
    target = tmp_path / "leader-epoch-checkpoint"

    def write(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fileio.os, "write", write)
    with pytest.raises(DiskFullError) as ei:
        atomic_write(target, b"0\n0\n")
    assert ei.value.path == str(target) and "No space left on device" in str(ei.value)
    assert os.listdir(tmp_path) == []


def test_a_missing_directory_is_named(tmp_path):
    with pytest.raises(FileNotFoundError) as ei:
        atomic_write(tmp_path / "absent" / "f", b"x")
    assert ei.value.filename == str(tmp_path / "absent" / "f.tmp")
    with pytest.raises(FileNotFoundError) as ei:
        fsync_dir(tmp_path / "absent")
    assert ei.value.filename == str(tmp_path / "absent")


def test_fsync_dir_reports_a_failed_fsync_with_the_directory(tmp_path, monkeypatch):
    def fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(fileio.os, "fsync", fsync)
    with pytest.raises(OSError) as ei:
        fsync_dir(tmp_path)
    assert ei.value.errno == errno.EIO and ei.value.filename == str(tmp_path)


def test_there_is_one_fsync_dir_and_one_atomic_writer():
    """No other module defines its own (the state files all go through fileio)."""
    root = pathlib.Path(fileio.__file__).resolve().parent.parent
    defs = []
    for pkg in ("kraft_storage", "kraft_node"):
        for p in sorted((root / pkg).rglob("*.py")):
            text = p.read_text()
            if re.search(r"^\s*def (_?fsync_dir|write_atomically|_?atomic_write)\b", text, re.MULTILINE):
                defs.append(str(p.relative_to(root)))
    assert defs == ["kraft_storage/fileio.py"]
