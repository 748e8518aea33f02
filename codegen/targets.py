"""Which schemas go into which generated file.

==============================================  ===================================
file                                            content
==============================================  ===================================
kraft_storage/_pure/_messages_metadata.py       metadata records (apiKey 0-28) +
                                                ``decode_metadata_record`` (Python)
kraft_storage/_native/_messages_metadata.pyx    the same text compiled by Cython
kraft_storage/messages/metadata.py              facade choosing one (``accel``)
kraft_storage/_pure/_metadata_columns.py        columnar body decoder of the metadata
                                                records (``codegen/columns.py`` and
                                                ``codegen/templates/``)
kraft_storage/_native/_metadata_columns.pyx     its Cython build (public API:
                                                kraft_storage/messages/columns.py)
kraft_storage/messages/_control_gen.py          control-record bodies
kraft_storage/messages/_quorum_state_gen.py     QuorumStateData
kraft_node/protocol/headers.py                  RequestHeader, ResponseHeader: facade over
                                                kraft_node/_native/_rpc_headers.pyx (Cython)
                                                and kraft_node/_pure/_rpc_headers.py (twin)
kraft_node/protocol/generated/<api>.py          one module per request/response pair; for the
                                                APIs in ``NATIVE_APIS`` a facade over
                                                kraft_node/_native/_rpc_<api>.pyx and its
                                                twin kraft_node/_pure/_rpc_<api>.py
kraft_node/protocol/generated/__init__.py       table of every API
==============================================  ===================================
"""
from __future__ import annotations

import os
from pathlib import Path

from .columns import columns_source
from .emit import HEADER, module_source
from .schema import MessageSpec, load, load_dir, snake

REPO_ROOT = Path(__file__).resolve().parent.parent

#: APIs with a Cython build: those on the Raft hot path (every replication round
#: trip decodes and encodes a Fetch and two headers).  Others stay pure Python.
NATIVE_APIS = ["FetchRequest"]

CONTROL = ["LeaderChangeMessage", "SnapshotHeaderRecord", "SnapshotFooterRecord",
           "KRaftVersionRecord", "VotersRecord"]

#: Schemas taken from ``more-messages/`` (the RPCs kraft does not generate by default) because
#: kraft serves them: UnregisterBroker (the controller's, KIP-631) and the legacy AlterConfigs
#: (the controller's ``legacyAlterConfigs``); and for the broker (issue 24): Envelope (apiKey 58,
#: how a broker forwards admin writes to the active controller) and DescribeTopicPartitions
#: (KIP-966, the paginated describe served from the broker's image); and for partitions on
#: brokers (issue 25): Produce, ListOffsets, OffsetForLeaderEpoch, InitProducerId, DeleteRecords,
#: DescribeLogDirs and FindCoordinator (answered COORDINATOR_NOT_AVAILABLE: no groups yet).
MORE_MESSAGES = ["UnregisterBrokerRequest", "UnregisterBrokerResponse",
                 "AlterConfigsRequest", "AlterConfigsResponse",
                 "EnvelopeRequest", "EnvelopeResponse",
                 "DescribeTopicPartitionsRequest", "DescribeTopicPartitionsResponse",
                 "ProduceRequest", "ProduceResponse",
                 "ListOffsetsRequest", "ListOffsetsResponse",
                 "OffsetForLeaderEpochRequest", "OffsetForLeaderEpochResponse",
                 "InitProducerIdRequest", "InitProducerIdResponse",
                 "DeleteRecordsRequest", "DeleteRecordsResponse",
                 "DescribeLogDirsRequest", "DescribeLogDirsResponse",
                 "FindCoordinatorRequest", "FindCoordinatorResponse"]


def default_schemas_dir() -> Path | None:
    env = os.environ.get("KRAFT_KAFKA_SCHEMAS")
    shared = Path(os.environ.get("KRAFT_SHARED", REPO_ROOT.parent / "shared"))
    for cand in ([Path(env)] if env else []) + [shared / "kafka-schemas"]:
        if cand.is_dir():
            return cand
    return None


def api_module_name(request_name: str) -> str:
    return snake(request_name[: -len("Request")])


def generate(root: Path) -> dict[str, str]:
    specs = load_dir(Path(root))
    for name in MORE_MESSAGES:
        spec = load(Path(root) / "more-messages" / f"{name}.json")
        spec.source = f"more-messages/{name}.json"
        specs[spec.name] = spec
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
    cdoc = ("Columnar decoder of Kafka's metadata record bodies (apiKey 0-28), one loop per type.\n\n"
            "``decode_type`` fills flat, Arrow-compatible column buffers for many records of\n"
            "one type at once (no Python object per record); ``LAYOUTS`` describes them.\n"
            "Generated by ``codegen/columns.py`` (read its docstring for the layout and the\n"
            "decoding rules); the public API is ``kraft_storage.messages.columns``.")
    files["kraft_storage/_pure/_metadata_columns.py"] = columns_source(
        metadata, cdoc + "\n\nPure-Python twin of kraft_storage._native._metadata_columns.", "py")
    files["kraft_storage/_native/_metadata_columns.pyx"] = columns_source(
        metadata, cdoc + "\n\nCython build (twin: kraft_storage._pure._metadata_columns); the type loops\n"
        "run without the GIL over raw pointers, every read checked against the record's end.", "pyx")

    files["kraft_storage/messages/_control_gen.py"] = module_source(
        [specs[n] for n in CONTROL],
        "Bodies of KRaft control records (leader change, snapshot header/footer, kraft.version, voters).")
    files["kraft_storage/messages/_quorum_state_gen.py"] = module_source(
        [specs["QuorumStateData"]], "QuorumStateData: the content of the ``quorum-state`` file (stored as JSON).")

    hdoc = ("Request and response headers.  Request header v1 (int16 ClientId) or v2 (+ tagged fields);\n"
            "response header v0 (correlation id) or v1 (+ tagged fields).")
    _native_pair(files, "headers", [specs["RequestHeader"], specs["ResponseHeader"]], hdoc,
                 "kraft_node/protocol/headers.py")

    apis = sorted((m for m in specs.values() if m.type == "request"), key=lambda m: m.api_key)
    table = []
    for req in apis:
        resp = specs[req.name[: -len("Request")] + "Response"]
        assert resp.api_key == req.api_key and resp.valid == req.valid, req.name
        mod = api_module_name(req.name)
        adoc = f"{req.name[:-7]} API (apiKey {req.api_key}): request and response."
        if req.name in NATIVE_APIS:
            _native_pair(files, mod, [req, resp], adoc, f"kraft_node/protocol/generated/{mod}.py")
        else:
            files[f"kraft_node/protocol/generated/{mod}.py"] = module_source([req, resp], adoc)
        table.append((req, resp, mod))
    files["kraft_node/protocol/generated/default_principal.py"] = module_source(
        [specs["DefaultPrincipalData"]], "DefaultPrincipalData: the serialized principal of forwarded requests.")
    files["kraft_node/protocol/generated/__init__.py"] = _api_table(table)
    return files


def _native_pair(files: dict[str, str], mod: str, msgs: list[MessageSpec], doc: str, facade: str) -> None:
    """A Cython build, its pure twin and the facade module that picks one (``accel``)."""
    files[f"kraft_node/_pure/_rpc_{mod}.py"] = module_source(
        msgs, doc + f"\n\nPure-Python twin of kraft_node._native._rpc_{mod}.")
    files[f"kraft_node/_native/_rpc_{mod}.pyx"] = module_source(
        msgs, doc + f"\n\nCython build of the same generated code (twin: kraft_node._pure._rpc_{mod}).", "pyx")
    names = [m.name for m in msgs]
    files[facade] = "\n".join([
        HEADER.rstrip("\n"),
        '"""' + doc,
        "",
        f"Picks the Cython build ``kraft_node._native._rpc_{mod}`` or its pure-Python twin",
        f"``kraft_node._pure._rpc_{mod}`` once, at import (``kraft_storage.accel``);",
        "``IMPLEMENTATION`` names the one in use.",
        '"""',
        "from kraft_storage.accel import load as _load",
        "",
        f'_impl = _load("_rpc_{mod}", package="kraft_node")',
        "IMPLEMENTATION = _impl.__name__",
        "",
        *(f"{n} = _impl.{n}" for n in names),
        "",
        "__all__ = [" + ", ".join(repr(n) for n in names) + ", 'IMPLEMENTATION']",
        ""])


def _metadata_facade(metadata: list[MessageSpec]) -> str:
    lines = [HEADER.rstrip("\n"),
             '"""Kafka metadata log record classes (apiKey 0-28).',
             "",
             "Picks the Cython build ``kraft_storage._native._messages_metadata`` or its",
             "pure-Python twin ``kraft_storage._pure._messages_metadata`` once, at import",
             "(see ``kraft_storage.accel``).  ``IMPLEMENTATION`` names the one in use.",
             '"""',
             "from kraft_storage.accel import load as _load",
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
              "__all__ = [",  # one name a line: the 29 names do not fit in 120 columns (E501)
              *(f"    {m.name!r}," for m in metadata),
              "    'METADATA_RECORD_TYPES',",
              "    'decode_metadata_record',",
              "    'IMPLEMENTATION',",
              "]",
              ""]
    return "\n".join(lines)


def _api_table(table) -> str:
    lines = [HEADER.rstrip("\n"),
             '"""Every Kafka API kraft has generated code for, from the schemas.',
             "",
             "``APIS`` rows: ``(name, api_key, request_class, response_class, lowest, highest,",
             "first_flexible_version, listeners)``.",
             '"""']
    for req, resp, mod in sorted(table, key=lambda row: row[2]):  # imports in ruff's (isort's) order
        lines.append(f"from .{mod} import {req.name}, {resp.name}")
    lines += ["", "APIS = ("]
    for req, resp, _mod in table:
        fv = [v for v in req.version_list if v in req.flexible]
        lines.append(f"    ({req.name[:-7]!r}, {req.api_key}, {req.name}, {resp.name}, {req.valid.lo}, "
                     f"{req.valid.hi}, {fv[0] if fv else None}, {tuple(sorted(req.listeners))!r}),")
    lines += [")", ""]
    return "\n".join(lines)
