"""JSON-safe views of metadata and control records for ``kraft-dump-log --json``.

``metadata_json(value)`` -> ``{"type": "PartitionRecord", "apiKey": 3, "version": 1,
"data": {...}}`` and ``control_json(key, value)`` -> ``{"type": "LEADER_CHANGE",
"data": {...}}``.  ``data`` uses the schema field names (``PartitionId``) and only
the fields of the record's version; Uuids are in Kafka's base64 form, bytes in
standard base64.  Garbage raises :class:`MessageError`.
"""
from __future__ import annotations

from kraft_storage.messages.control import CONTROL_BODY_VERSION, decode_control_record
from kraft_storage.messages.framing import decode_metadata_record
from kraft_storage.messages.runtime import MessageError

__all__ = ["metadata_json", "control_json", "MessageError"]


def metadata_json(value, offset=None) -> dict:
    if value is None:
        raise MessageError("metadata record has a null value", offset=offset)
    api_key, version, msg = decode_metadata_record(value, offset)
    return {"type": msg.NAME, "apiKey": api_key, "version": version, "data": msg.to_dict(version)}


def control_json(key, value) -> dict:
    ctype, body = decode_control_record(key, value)
    return {"type": ctype.name, "data": body.to_dict(CONTROL_BODY_VERSION)}
