"""KRaft control records: the key codec, the control types and their bodies.

A control record sits in a batch whose attributes have the control bit (0x20).
Its key is 4 bytes: int16 key version (0) + int16 control type.  Its value is
the body for that type, encoded at a fixed schema version 0 (Kafka's
``ControlRecordUtils`` constants); each body begins with its own int16
``Version`` field.

=====  ================  ===========================================
type   name              value
=====  ================  ===========================================
0      ABORT             int16 version + int32 coordinator epoch
1      COMMIT            same as ABORT (``EndTransactionMarker``)
2      LEADER_CHANGE     ``LeaderChangeMessage``
3      SNAPSHOT_HEADER   ``SnapshotHeaderRecord``
4      SNAPSHOT_FOOTER   ``SnapshotFooterRecord``
5      KRAFT_VERSION     ``KRaftVersionRecord``
6      KRAFT_VOTERS      ``VotersRecord``
=====  ================  ===========================================
"""
from __future__ import annotations

import enum
import struct

from kraft_storage.messages._control_gen import (
    KRaftVersionRecord,
    LeaderChangeMessage,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    VotersRecord,
)
from kraft_storage.messages.runtime import MessageError

__all__ = ["ControlRecordType", "EndTransactionMarker", "LeaderChangeMessage", "SnapshotHeaderRecord",
           "SnapshotFooterRecord", "KRaftVersionRecord", "VotersRecord", "CONTROL_BODY_CLASSES",
           "decode_control_key", "encode_control_key", "decode_control_record", "encode_control_value",
           "CONTROL_KEY_VERSION", "CONTROL_BODY_VERSION"]

#: Key version Kafka writes (and the only one whose layout is known).
CONTROL_KEY_VERSION = 0
#: Schema version Kafka reads and writes control bodies at.
CONTROL_BODY_VERSION = 0

_KEY = struct.Struct(">hh")
_MARKER = struct.Struct(">hi")


class ControlRecordType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


class EndTransactionMarker:
    """Value of ABORT/COMMIT control records: int16 version + int32 coordinator epoch.

    Bytes after those six (a future version's additions) are kept in
    ``trailing`` so the value re-encodes unchanged, as Kafka reads them at version 0.
    """

    __slots__ = ("version", "coordinator_epoch", "trailing")
    NAME = "EndTransactionMarker"

    def __init__(self, *, version: int = 0, coordinator_epoch: int = 0, trailing: bytes = b""):
        self.version = version
        self.coordinator_epoch = coordinator_epoch
        self.trailing = trailing

    @classmethod
    def read(cls, buf, version: int = 0):
        buf = bytes(buf)
        if len(buf) < 6:
            raise MessageError(f"end transaction marker needs 6 bytes, got {len(buf)}", 0)
        v, epoch = _MARKER.unpack_from(buf, 0)
        if v < 0:
            raise MessageError(f"negative end transaction marker version {v}", 0)
        if v == 0 and len(buf) != 6:
            raise MessageError(f"{len(buf) - 6} unexpected trailing bytes after EndTransactionMarker", 6)
        return cls(version=v, coordinator_epoch=epoch, trailing=buf[6:])

    def write(self, version: int = 0) -> bytes:
        try:
            return _MARKER.pack(self.version, self.coordinator_epoch) + self.trailing
        except struct.error as exc:
            raise MessageError(f"cannot write EndTransactionMarker: {exc}") from None

    def to_dict(self, version=None) -> dict:
        return {"Version": self.version, "CoordinatorEpoch": self.coordinator_epoch}

    def __eq__(self, other):
        if type(other) is not EndTransactionMarker:
            return NotImplemented
        return (self.version, self.coordinator_epoch, self.trailing) == (
            other.version, other.coordinator_epoch, other.trailing)

    __hash__ = None

    def __repr__(self):
        return f"EndTransactionMarker(version={self.version}, coordinator_epoch={self.coordinator_epoch})"


#: control type -> body class.
CONTROL_BODY_CLASSES = {
    ControlRecordType.ABORT: EndTransactionMarker,
    ControlRecordType.COMMIT: EndTransactionMarker,
    ControlRecordType.LEADER_CHANGE: LeaderChangeMessage,
    ControlRecordType.SNAPSHOT_HEADER: SnapshotHeaderRecord,
    ControlRecordType.SNAPSHOT_FOOTER: SnapshotFooterRecord,
    ControlRecordType.KRAFT_VERSION: KRaftVersionRecord,
    ControlRecordType.KRAFT_VOTERS: VotersRecord,
}


def decode_control_key(key) -> tuple[int, ControlRecordType]:
    """``(key_version, type)`` from a control record key."""
    if key is None:
        raise MessageError("control record has a null key")
    key = bytes(key)
    if len(key) < 4:
        raise MessageError(f"control record key of {len(key)} bytes, 4 needed", 0)
    version, ctype = _KEY.unpack_from(key, 0)
    if version < 0:
        raise MessageError(f"negative control record key version {version}", 0)
    if version == CONTROL_KEY_VERSION and len(key) != 4:
        raise MessageError(f"control record key v0 of {len(key)} bytes, 4 expected", 4)
    try:
        return version, ControlRecordType(ctype)
    except ValueError:
        raise MessageError(f"unknown control record type {ctype}", 2) from None


def encode_control_key(ctype: ControlRecordType | int, version: int = CONTROL_KEY_VERSION) -> bytes:
    return _KEY.pack(version, int(ctype))


def decode_control_record(key, value):
    """``(ControlRecordType, body)`` of a control record (body decoded at version 0)."""
    _, ctype = decode_control_key(key)
    if value is None:
        raise MessageError(f"{ctype.name} control record has a null value")
    try:
        return ctype, CONTROL_BODY_CLASSES[ctype].read(value, CONTROL_BODY_VERSION)
    except MessageError as exc:
        exc.within(ctype.name)  # the same error, its field path prefixed: re-raised as is
        raise


def encode_control_value(ctype: ControlRecordType | int, body) -> bytes:
    ctype = ControlRecordType(ctype)
    if type(body) is not CONTROL_BODY_CLASSES[ctype]:
        raise MessageError(f"{type(body).__name__} is not the body of a {ctype.name} control record")
    return body.write(CONTROL_BODY_VERSION)
