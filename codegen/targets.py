"""Which schemas go into which generated file.

==============================================  ===================================
file                                            content
==============================================  ===================================
kraft_storage/_pure/_messages_metadata.py       metadata records (apiKey 0-28) +
                                                ``decode_metadata_record`` (Python)
kraft_storage/_native/_messages_metadata.pyx    the same text compiled by Cython
kraft_storage/messages/metadata.py              facade choosing one (``_accel``)
kraft_storage/messages/_control_gen.py          control-record bodies
kraft_storage/messages/_quorum_state_gen.py     QuorumStateData
kraft_node/protocol/headers.py                  RequestHeader, ResponseHeader
kraft_node/protocol/generated/<api>.py          one module per request/response pair
kraft_node/protocol/generated/__init__.py       table of every API
==============================================  ===================================
"""
from __future__ import annotations

import os
from pathlib import Path

from .emit import HEADER, module_source
from .schema import MessageSpec, load_dir, snake

REPO_ROOT = Path(__file__).resolve().parent.parent

CONTROL = ["LeaderChangeMessage", "SnapshotHeaderRecord", "SnapshotFooterRecord",
           "KRaftVersionRecord", "VotersRecord"]


def default_schemas_dir() -> Path | None:
    env = os.environ.get("KRAFT_KAFKA_SCHEMAS")
    for cand in ([Path(env)] if env else []) + [Path("/work/shared/kafka-schemas"),
                                                   REPO_ROOT.parent / "shared" / "kafka-schemas"]:
        if cand.is_dir():
            return cand
    return None


def api_module_name(request_name: str) -> str:
    return snake(request_name[: -len("Request")])


def generate(root: Path) -> dict[str, str]:
    specs = load_dir(Path(root))
    files: dict[str, str] = {}

    metadata = sorted((m for m in specs.values() if m.type == "metadata"), key=lambda m: m.api_key)
    doc = ("Kafka's metadata log records (``__cluster_metadata``), apiKey 0-28.\n\n"
           "Each class decodes/encodes the record *body*; ``decode_metadata_record``\n"
           "also parses the frame (uvarint frame version 1, apiKey, version).")
    files["kraft_storage/_pure/_messages_metadata.py"] = module_source(metadata, doc, "py", metadata=True)
    files["kraft_storage/_native/_messages_metadata.pyx"] = module_source(
        metadata, doc + "\n\nCython build of the same generated code (twin: kraft_storage._pure._messages_metadata).",
        "pyx", metadata=True)
    files["kraft_storage/messages/metadata.py"] = _metadata_facade(metadata)

    files["kraft_storage/messages/_control_gen.py"] = module_source(
        [specs[n] for n in CONTROL],
        "Bodies of KRaft control records (leader change, snapshot header/footer, kraft.version, voters).")
    files["kraft_storage/messages/_quorum_state_gen.py"] = module_source(
        [specs["QuorumStateData"]], "QuorumStateData: the content of the ``quorum-state`` file (stored as JSON).")

    files["kraft_node/protocol/headers.py"] = module_source(
        [specs["RequestHeader"], specs["ResponseHeader"]],
        "Request and response headers.  Request header v1 (int16 ClientId) or v2 (+ tagged fields);\n"
        "response header v0 (correlation id) or v1 (+ tagged fields).")

    apis = sorted((m for m in specs.values() if m.type == "request"), key=lambda m: m.api_key)
    table = []
    for req in apis:
        resp = specs[req.name[: -len("Request")] + "Response"]
        assert resp.api_key == req.api_key and resp.valid == req.valid, req.name
        mod = api_module_name(req.name)
        files[f"kraft_node/protocol/generated/{mod}.py"] = module_source(
            [req, resp], f"{req.name[:-7]} API (apiKey {req.api_key}): request and response.")
        table.append((req, resp, mod))
    files["kraft_node/protocol/generated/default_principal.py"] = module_source(
        [specs["DefaultPrincipalData"]], "DefaultPrincipalData: the serialized principal of forwarded requests.")
    files["kraft_node/protocol/generated/__init__.py"] = _api_table(table)
    return files


def _metadata_facade(metadata: list[MessageSpec]) -> str:
    lines = [HEADER.rstrip("\n"),
             '"""Kafka metadata log record classes (apiKey 0-28).',
             "",
             "Picks the Cython build ``kraft_storage._native._messages_metadata`` or its",
             "pure-Python twin ``kraft_storage._pure._messages_metadata`` once, at import",
             "(see ``kraft_storage._accel``).  ``IMPLEMENTATION`` names the one in use.",
             '"""',
             "from kraft_storage._accel import load as _load",
             "",
             '_impl = _load("_messages_metadata")',
             "IMPLEMENTATION = _impl.__name__",
             ""]
    for m in metadata:
        lines.append(f"{m.name} = _impl.{m.name}")
    lines += ["",
              "#: apiKey -> record class.",
              "METADATA_RECORD_TYPES = _impl.METADATA_RECORD_TYPES",
              "decode_metadata_record = _impl.decode_metadata_record",
              "",
              "__all__ = [" + ", ".join(repr(m.name) for m in metadata)
              + ", 'METADATA_RECORD_TYPES', 'decode_metadata_record', 'IMPLEMENTATION']",
              ""]
    return "\n".join(lines)


def _api_table(table) -> str:
    lines = [HEADER.rstrip("\n"),
             '"""Every Kafka API kraft has generated code for, from the schemas.',
             "",
             "``APIS`` rows: ``(name, api_key, request_class, response_class, lowest, highest,",
             "first_flexible_version, listeners)``.",
             '"""']
    for req, resp, mod in table:
        lines.append(f"from .{mod} import {req.name}, {resp.name}")
    lines += ["", "APIS = ("]
    for req, resp, mod in table:
        fv = [v for v in req.version_list if v in req.flexible]
        lines.append(f"    ({req.name[:-7]!r}, {req.api_key}, {req.name}, {resp.name}, {req.valid.lo}, "
                     f"{req.valid.hi}, {fv[0] if fv else None}, {tuple(sorted(req.listeners))!r}),")
    lines += [")", ""]
    return "\n".join(lines)
