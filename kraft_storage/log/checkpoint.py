"""Kafka's checkpoint-file format (parse and format; the durable write is in ``fileio``).

Kafka's ``CheckpointFile`` text format (used by ``leader-epoch-checkpoint``)::

    <version>\\n            always 0
    <count>\\n              number of entry lines that follow
    <entry>\\n ...          one line per entry, fields separated by one space

Writes go through :func:`kraft_storage.fileio.atomic_write` (``<name>.tmp``,
fsync, rename over the target, fsync the directory), so a crash leaves either
the old or the new file, never a mix (Kafka's ``Utils.atomicMoveWithFallback``).
"""
from __future__ import annotations

from collections.abc import Iterable

from kraft_storage.errors import KraftStorageError


class CheckpointFileError(KraftStorageError):
    """A checkpoint file is malformed; the message names the file and line."""


def parse_checkpoint(text: str, path: str, fields: int, version: int = 0) -> list[list[str]]:
    """Entries of a Kafka checkpoint file as lists of ``fields`` strings."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CheckpointFileError(f"{path}: truncated checkpoint file ({len(lines)} lines, need >= 2)")
    if lines[0].strip() != str(version):
        raise CheckpointFileError(f"{path}: line 1: unrecognized version {lines[0]!r} (expected {version})")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointFileError(f"{path}: line 2: expected the entry count, got {lines[1]!r}") from None
    if count < 0 or count != len(lines) - 2:
        raise CheckpointFileError(f"{path}: line 2 says {count} entries but the file has {len(lines) - 2}")
    out = []
    for i, line in enumerate(lines[2:], start=3):
        parts = line.split(" ")
        if len(parts) != fields or any(p == "" for p in parts):
            raise CheckpointFileError(f"{path}: line {i}: expected {fields} space-separated fields, got {line!r}")
        out.append(parts)
    return out


def format_checkpoint(entries: Iterable[Iterable[object]], version: int = 0) -> bytes:
    entries = list(entries)
    lines = [str(version), str(len(entries))] + [" ".join(str(f) for f in e) for e in entries]
    return ("\n".join(lines) + "\n").encode("ascii")
