"""What a controller operation returns, and the record form the controller works in.

Why a module of its own: every control manager produces these and the
:class:`~kraft_node.metadata.controller.quorum_controller.QuorumController` consumes
them, so they sit below both.

* :class:`ApiMessageAndVersion` -- a generated metadata record (``kraft_storage.messages.metadata``)
  and the version it is written at (Kafka's ``ApiMessageAndVersion``).  ``encode()`` is the
  framed record value that goes into a ``__cluster_metadata`` batch.
* :class:`FramedRecord` -- an ApiMessageAndVersion already encoded (made in bulk by the
  snapshot writer and by topic creation): ``encode()`` is its value, ``message`` decodes it
  on demand, ``api_key`` reads its frame header.
* :class:`ControllerResult` -- ``(records, response, atomic)``: the records a write
  operation wants appended and the answer its caller gets once they commit.  A manager's
  write method builds one and changes nothing: only ``replay`` mutates state (the same
  ``replay`` a standby runs on committed records, which is what keeps the quorum identical).
  ``atomic``: all records in one Raft batch (at most ``MAX_RECORDS_PER_BATCH``), else they may
  be split over several.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Sequence, TypeVar

from kraft_storage.messages.framing import decode_metadata_record, encode_metadata_record

T = TypeVar("T")

#: Kafka's ``QuorumController.MAX_RECORDS_PER_BATCH`` and ``MAX_RECORDS_PER_USER_OP``:
#: the most records in one Raft batch, and in one operation's result.
MAX_RECORDS_PER_BATCH = 10_000
MAX_RECORDS_PER_USER_OP = 10_000


@dataclass(frozen=True, slots=True)
class ApiMessageAndVersion:
    """A metadata record and the version it is (to be) written at."""
    message: Any
    version: int

    def encode(self) -> bytes:
        """The framed record value (frame version, apiKey, version, body)."""
        return encode_metadata_record(self.message, self.version)

    def __repr__(self) -> str:
        return f"ApiMessageAndVersion({self.message!r} at version {self.version})"


class FramedRecord(ApiMessageAndVersion):
    """A record already encoded: ``encode()`` is its framed value, ``message`` decodes it on
    demand (the snapshot writer and the columnar replay only need the bytes).  Equal to an
    ApiMessageAndVersion of the same message and version."""

    __slots__ = ("_value",)
    _value: bytes

    def __init__(self, value: bytes, version: int):
        object.__setattr__(self, "_value", value)
        object.__setattr__(self, "version", version)

    @property
    def message(self) -> Any:
        return decode_metadata_record(self._value, 0)[2]

    @property
    def api_key(self) -> int:
        """The record type, from the frame header (frame version, then the api key, both
        unsigned varints) without decoding the body."""
        value = self._value
        pos = 1
        while value[pos - 1] & 0x80:  # a frame version of more than one byte
            pos += 1
        key = shift = 0
        while True:
            byte = value[pos]
            key |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return key
            pos += 1
            shift += 7

    def encode(self) -> bytes:
        return self._value

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FramedRecord):
            return self._value == other._value
        if isinstance(other, ApiMessageAndVersion):
            return bool(self.version == other.version and self.message == other.message)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FramedRecord({self.message!r} at version {self.version})"


@dataclass(slots=True)
class ControllerResult(Generic[T]):
    """The records an operation appends and the response its caller gets after they commit."""
    records: list[ApiMessageAndVersion] = field(default_factory=list)
    response: T = None  # type: ignore[assignment]
    atomic: bool = False

    @classmethod
    def of(cls, records: Sequence[ApiMessageAndVersion], response: T) -> "ControllerResult[T]":
        """A non-atomic result (its records may span several batches)."""
        return cls(list(records), response, False)

    @classmethod
    def atomic_of(cls, records: Sequence[ApiMessageAndVersion], response: T) -> "ControllerResult[T]":
        """An atomic result: its records go in one batch, all or nothing."""
        return cls(list(records), response, True)

    def without_records(self) -> "ControllerResult[T]":
        """The same response with no records (``validateOnly`` requests)."""
        return ControllerResult([], self.response, self.atomic)
