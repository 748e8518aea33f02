"""Parse Kafka's JSON message schemas into a small model the emitter walks.

The format (see ``kafka-schemas/README.md``): JSON with ``//`` line comments;
a top-level object with ``name``, ``type``, ``apiKey``, ``validVersions``,
``flexibleVersions``, ``fields`` and optional ``commonStructs``.  A field has
``name``, ``type`` (scalar, ``string``/``bytes``/``records``, ``uuid``, ``[]T``
or a struct name), ``versions`` and optional ``nullableVersions``,
``taggedVersions`` + ``tag``, ``default``, ``ignorable``, ``flexibleVersions``
and, for inline structs, nested ``fields``.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

SCALARS = {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "uuid"}
BLOBS = {"string", "bytes", "records"}
PRIMITIVES = SCALARS | BLOBS

RESERVED_ATTRS = {"read", "write", "to_dict", "from_dict", "unknown_tagged_fields", "NAME",
                  "API_KEY", "LOWEST_VERSION", "HIGHEST_VERSION"}


@dataclass(frozen=True)
class Versions:
    """An inclusive version range; ``hi`` None means open-ended, ``empty`` means "none"."""

    lo: int = 0
    hi: int | None = None
    empty: bool = False

    @classmethod
    def parse(cls, text: str | None, default: "Versions | None" = None) -> "Versions":
        if text is None:
            return default if default is not None else cls(empty=True)
        text = text.strip()
        if text == "none":
            return cls(empty=True)
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            a, b = text.split("-")
            return cls(int(a), int(b))
        return cls(int(text), int(text))

    def __contains__(self, v: int) -> bool:
        return not self.empty and self.lo <= v and (self.hi is None or v <= self.hi)

    def __str__(self):
        if self.empty:
            return "none"
        if self.hi is None:
            return f"{self.lo}+"
        return f"{self.lo}" if self.lo == self.hi else f"{self.lo}-{self.hi}"


def snake(name: str) -> str:
    """``IsMigratingZkBroker`` -> ``is_migrating_zk_broker``; ``KRaftVersion`` -> ``k_raft_version``."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.lower()


@dataclass
class FieldSpec:
    name: str
    type: str
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: str | None
    ignorable: bool
    flexible_override: Versions | None
    about: str
    struct: "StructSpec | None" = None  # filled for struct / []struct fields

    @property
    def attr(self) -> str:
        return snake(self.name)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def elem(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.elem not in PRIMITIVES


@dataclass
class StructSpec:
    name: str
    fields: list[FieldSpec]
    versions: Versions
    common: bool = False


@dataclass
class MessageSpec:
    name: str
    type: str
    api_key: int | None
    valid: Versions
    flexible: Versions
    fields: list[FieldSpec]
    structs: dict[str, StructSpec] = field(default_factory=dict)  # in definition order
    listeners: list[str] = field(default_factory=list)
    source: str = ""

    @property
    def version_list(self) -> list[int]:
        return list(range(self.valid.lo, self.valid.hi + 1))


def strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


def load(path: Path) -> MessageSpec:
    data = json.loads(strip_comments(path.read_text(encoding="utf-8")))
    valid = Versions.parse(data["validVersions"])
    if valid.hi is None:
        raise ValueError(f"{path}: validVersions must be bounded")
    msg = MessageSpec(
        name=data["name"], type=data["type"], api_key=data.get("apiKey"), valid=valid,
        flexible=Versions.parse(data.get("flexibleVersions"), Versions(empty=True)),
        fields=[], listeners=list(data.get("listeners", [])), source=path.name,
    )
    pending: list[FieldSpec] = []
    for cs in data.get("commonStructs", []):
        st = StructSpec(cs["name"], [], Versions.parse(cs.get("versions"), Versions(0)), common=True)
        msg.structs[st.name] = st
        st.fields = [_field(f, msg, pending) for f in cs["fields"]]
    msg.fields = [_field(f, msg, pending) for f in data["fields"]]
    for f in pending:  # references to commonStructs by name
        if f.elem not in msg.structs:
            raise ValueError(f"{path}: unknown struct type {f.elem} in field {f.name}")
        f.struct = msg.structs[f.elem]
    _validate(msg, path)
    return msg


def _default_text(d):
    """Defaults are strings in most schemas, but a few use JSON numbers/booleans."""
    if isinstance(d, bool):
        return "true" if d else "false"
    if isinstance(d, (int, float)):
        return str(d)
    return d


def _field(d: dict, msg: MessageSpec, pending: list) -> FieldSpec:
    versions = Versions.parse(d["versions"])
    f = FieldSpec(
        name=d["name"], type=d["type"], versions=versions,
        nullable=Versions.parse(d.get("nullableVersions")),
        tagged=Versions.parse(d.get("taggedVersions")),
        tag=d.get("tag"), default=_default_text(d.get("default")), ignorable=bool(d.get("ignorable", False)),
        flexible_override=Versions.parse(d["flexibleVersions"]) if "flexibleVersions" in d else None,
        about=d.get("about", ""),
    )
    if f.is_struct:
        if "fields" in d:
            if f.elem in msg.structs:
                raise ValueError(f"struct {f.elem} defined twice in {msg.name}")
            st = StructSpec(f.elem, [], versions)
            msg.structs[f.elem] = st  # register before children: parents come first
            st.fields = [_field(x, msg, pending) for x in d["fields"]]
            f.struct = st
        else:
            pending.append(f)
    return f


def _validate(msg: MessageSpec, path: Path):
    def check(fields, where):
        attrs = set()
        tags = set()
        for f in fields:
            if f.attr in RESERVED_ATTRS or f.attr in attrs:
                raise ValueError(f"{path}: field name {f.name} in {where} clashes")
            attrs.add(f.attr)
            if not f.tagged.empty:
                if f.tag is None or f.tag in tags:
                    raise ValueError(f"{path}: bad or duplicate tag on {where}.{f.name}")
                tags.add(f.tag)
                for v in msg.version_list:
                    if v in f.tagged and v not in msg.flexible:
                        raise ValueError(f"{path}: {f.name} tagged in non-flexible version {v}")
    check(msg.fields, msg.name)
    for st in msg.structs.values():
        check(st.fields, st.name)


def load_dir(root: Path) -> dict[str, MessageSpec]:
    """All schemas under ``root`` (``message/``, ``metadata/``, ``raft/``) keyed by name."""
    out = {}
    for sub in ("message", "metadata", "raft"):
        for p in sorted((root / sub).glob("*.json")):
            m = load(p)
            m.source = f"{sub}/{p.name}"
            out[m.name] = m
    return out
