"""``partition.metadata``: the topic id of the partition, in Kafka's text format.

Layout (no trailing newline, as Kafka writes it)::

    version: 0
    topic_id: <22-char URL-safe-less base64 of the 16-byte UUID, no padding>

The metadata topic ``__cluster_metadata`` has the fixed id
``AAAAAAAAAAAAAAAAAAAAAQ`` (UUID 0...01).
"""
from __future__ import annotations

import base64
import os

from kraft_storage.errors import KraftStorageError
from kraft_storage.fileio import atomic_write

PARTITION_METADATA = "partition.metadata"
METADATA_TOPIC_ID = b"\x00" * 15 + b"\x01"


class PartitionMetadataError(KraftStorageError):
    """``partition.metadata`` is malformed."""


def encode_topic_id(uuid16: bytes) -> str:
    if len(uuid16) != 16:
        raise ValueError("a topic id is 16 bytes")
    return base64.urlsafe_b64encode(uuid16).decode("ascii").rstrip("=")


def decode_topic_id(text: str) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except Exception:
        raw = b""
    if len(raw) != 16:
        raise PartitionMetadataError(f"topic id {text!r} is not a base64 16-byte UUID")
    return raw


def format_partition_metadata(topic_id: bytes) -> bytes:
    return f"version: 0\ntopic_id: {encode_topic_id(topic_id)}".encode("ascii")


def read_partition_metadata(path: str) -> bytes:
    """The 16-byte topic id stored in ``path``."""
    with open(path, "rb") as f:
        text = f.read().decode("ascii", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != 2 or not lines[0].startswith("version: ") or not lines[1].startswith("topic_id: "):
        raise PartitionMetadataError(f"{path}: expected 'version: 0' and 'topic_id: <id>' lines")
    if lines[0][len("version: "):].strip() != "0":
        raise PartitionMetadataError(f"{path}: unsupported version {lines[0]!r}")
    try:
        return decode_topic_id(lines[1][len("topic_id: "):].strip())
    except PartitionMetadataError as exc:
        raise PartitionMetadataError(f"{path}: {exc}") from None


def write_partition_metadata(directory: str, topic_id: bytes, *, sync: bool = True) -> None:
    atomic_write(os.path.join(directory, PARTITION_METADATA), format_partition_metadata(topic_id), sync=sync)
