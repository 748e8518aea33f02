"""Framing of metadata records as Kafka writes them in ``__cluster_metadata``.

A metadata record has a null key.  Its value is::

    uvarint frame version   (always 1)
    uvarint apiKey          (record type, 0-28; see METADATA_RECORD_TYPES)
    uvarint record version  (within the type's validVersions)
    body                    (the record's fields, flexible encoding)

``decode_metadata_record`` comes from the generated module (native when built),
so the whole decode is one call into compiled code.
"""
from __future__ import annotations

from kraft_storage.messages.metadata import METADATA_RECORD_TYPES, decode_metadata_record
from kraft_storage.messages.runtime import Message, MessageError, uvarint_bytes

__all__ = ["FRAME_VERSION", "METADATA_RECORD_TYPES", "decode_metadata_record", "encode_metadata_record",
           "frame_header"]

#: The only frame version Kafka has ever written.
FRAME_VERSION = 1


#: (apiKey, version) -> its frame header: built once (a creation frames ~10,000 records an
#: event; three uvarint calls a record cost more than a third of the encode)
_HEADERS: dict[tuple[int, int], bytes] = {}


def frame_header(api_key: int, version: int) -> bytes:
    """The three uvarints that precede a record body."""
    header = _HEADERS.get((api_key, version))
    if header is None:
        header = uvarint_bytes(FRAME_VERSION) + uvarint_bytes(api_key) + uvarint_bytes(version)
        if len(_HEADERS) < 4096:  # record types x versions: a few hundred at most
            _HEADERS[(api_key, version)] = header
    return header


def encode_metadata_record(message: Message, version: int) -> bytes:
    """The record value for ``message`` at ``version`` (the key stays null)."""
    api_key = getattr(message, "API_KEY", None)
    if METADATA_RECORD_TYPES.get(api_key) is not type(message):
        raise MessageError(f"{type(message).__name__} is not a metadata record class of this process")
    return frame_header(api_key, version) + message.write(version)
