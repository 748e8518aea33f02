"""The ``quorum-state`` file: ``QuorumStateData`` as one line of JSON text.

Kafka (``FileQuorumStateStore``) writes the JSON form of ``QuorumStateData`` at
``data_version`` 0 or 1, with Kafka's JSON converter names (``leaderId``,
``currentVoters``...), in schema field order, only the fields of that version,
then a ``data_version`` member; compact (no spaces), no newline.  Version 0
example (a fixture file, byte for byte)::

    {"clusterId":"","leaderId":1,"leaderEpoch":6,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1}],"data_version":0}

Version 1 drops clusterId/appliedOffset/currentVoters and adds votedDirectoryId
(a Kafka base64 Uuid).  Reading requires every field of the version (as Kafka's
converter does) and ignores unknown members.
"""
from __future__ import annotations

import json
import os

from kraft_storage.fileio import atomic_write
from kraft_storage.messages._quorum_state_gen import QuorumStateData
from kraft_storage.messages.runtime import MessageError, kafka_json_names

__all__ = ["QuorumStateData", "read_quorum_state", "write_quorum_state", "read_quorum_state_file",
           "write_quorum_state_file", "DATA_VERSION_KEY", "LOWEST_DATA_VERSION", "HIGHEST_DATA_VERSION"]

DATA_VERSION_KEY = "data_version"
LOWEST_DATA_VERSION = QuorumStateData.LOWEST_VERSION
HIGHEST_DATA_VERSION = QuorumStateData.HIGHEST_VERSION


def _schema_name(json_name: str) -> str:
    return json_name[:1].upper() + json_name[1:]


def _from_kafka_json(cls, obj, version, path):
    if not isinstance(obj, dict):
        raise MessageError(f"JSON object expected for {cls.NAME}, got {type(obj).__name__}").within(path)
    d = {}
    for _attr, name, kind, lo, hi, scls, *_ in cls._JSON:
        if not (lo <= version and (hi is None or version <= hi)):
            continue
        key = name[:1].lower() + name[1:]
        if key not in obj:
            raise MessageError(f"{cls.NAME}: unable to locate field '{key}', which is mandatory "
                               f"in version {version}").within(path)
        v = obj[key]
        if scls is not None and v is not None:
            if kind.startswith("[]"):
                v = [_from_kafka_json(scls, e, version, f"{path}.{name}").to_dict(version) for e in v]
            else:
                v = _from_kafka_json(scls, v, version, f"{path}.{name}").to_dict(version)
        d[name] = v
    return cls.from_dict(d, version)


def read_quorum_state(text: str) -> tuple[QuorumStateData, int]:
    """Parse the file's text; returns ``(data, data_version)``."""
    line = text.split("\n", 1)[0]
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise MessageError(f"quorum-state is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise MessageError("quorum-state JSON is not an object")
    version = obj.get(DATA_VERSION_KEY)
    if type(version) is not int:
        raise MessageError(f"quorum-state has no integer {DATA_VERSION_KEY} member")
    if not LOWEST_DATA_VERSION <= version <= HIGHEST_DATA_VERSION:
        raise MessageError(f"data_version ({version}) is not within the min ({LOWEST_DATA_VERSION}) "
                           f"and max ({HIGHEST_DATA_VERSION}) supported version")
    data = _from_kafka_json(QuorumStateData, obj, version, "QuorumStateData")
    data.write(version)  # validates ranges and nullability like the binary form would
    return data, version


def write_quorum_state(data: QuorumStateData, version: int) -> str:
    """The exact text Kafka writes for ``data`` at ``data_version`` ``version``."""
    if not LOWEST_DATA_VERSION <= version <= HIGHEST_DATA_VERSION:
        raise MessageError(f"quorum state data version {version} is not supported")
    data.write(version)  # refuse values the version cannot carry, as Kafka's converter does
    obj = kafka_json_names(data.to_dict(version))
    obj.pop("_unknownTaggedFields", None)
    obj[DATA_VERSION_KEY] = version
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def read_quorum_state_file(path) -> tuple[QuorumStateData, int]:
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    try:
        return read_quorum_state(text)
    except MessageError as exc:
        raise MessageError(f"{exc} in {os.fspath(path)}") from None


def write_quorum_state_file(path, data: QuorumStateData, version: int) -> None:
    """Write atomically, as Kafka does: temp file, fsync, rename, fsync the directory
    (:func:`kraft_storage.fileio.atomic_write`)."""
    atomic_write(path, write_quorum_state(data, version))
