"""How Kafka prints the values the shell shows (``toString`` of Kafka's registrations, records and numbers).

Why a module of its own: the shell's ``cat`` output is what operators compare with Kafka's own
``kafka-metadata-shell``, so the leaves print Kafka's text, not Python's ``repr``: a broker as
``BrokerRegistration(id=1, epoch=5, incarnationId=..., listeners=[Endpoint(listenerName='PLAINTEXT', ...)], ...)``,
a quota as Java prints a ``double`` (``1024.0``, ``1.0E7``), a time as
``DateTimeFormatter.ISO_ZONED_DATE_TIME`` in UTC (``2024-01-02T03:04:05.678Z[UTC]``), a record as
its generated ``toString`` (``TopicRecord(name='foo', topicId=...)``).  kraft's own types keep
their Python reprs; these functions are the shell's rendering of them.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from kraft_node.metadata.controller.cluster_control import (
    SECURITY_PROTOCOLS,
    BrokerRegistration,
    ControllerRegistration,
    Endpoint,
)
from kraft_storage.messages.runtime import Uuid

__all__ = [
    "broker_registration_text", "controller_registration_text", "java_double", "java_list", "record_text",
    "utc_zoned_time", "version_range_text",
]

_SHORT_MAX = 32767
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def java_list(items: Iterable[object]) -> str:
    """``[a, b]`` as Java's ``List.toString`` (and ``Arrays.toString``)."""
    return "[" + ", ".join(str(i) for i in items) + "]"


def version_range_text(lo: int, hi: int) -> str:
    """Kafka's ``VersionRange.toString``: ``3``, ``1+`` (no upper bound) or ``1-19``."""
    if lo == hi:
        return str(lo)
    if hi == _SHORT_MAX:
        return f"{lo}+"
    return f"{lo}-{hi}"


def endpoint_text(e: Endpoint) -> str:
    protocol = SECURITY_PROTOCOLS.get(e.security_protocol, str(e.security_protocol))
    return f"Endpoint(listenerName='{e.name}', securityProtocol={protocol}, host='{e.host}', port={e.port})"


def _listeners(listeners: Mapping[str, Endpoint]) -> str:
    return "[" + ", ".join(endpoint_text(listeners[n]) for n in sorted(listeners)) + "]"


def _features(features: Mapping[str, tuple[int, int]]) -> str:
    return "{" + ", ".join(f"{n}: {version_range_text(*features[n])}" for n in sorted(features)) + "}"


def _java_str(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def broker_registration_text(r: BrokerRegistration) -> str:
    """Kafka's ``BrokerRegistration.toString`` (listeners and features sorted by name)."""
    return (f"BrokerRegistration(id={r.id}, epoch={r.epoch}, incarnationId={r.incarnation_id}, "
            f"listeners={_listeners(r.listeners)}, supportedFeatures={_features(r.supported_features)}, "
            f"rack={_java_str(r.rack)}, fenced={_java_str(r.fenced)}, "
            f"inControlledShutdown={_java_str(r.in_controlled_shutdown)}, "
            f"isMigratingZkBroker={_java_str(r.is_migrating_zk_broker)}, directories={java_list(r.directories)})")


def controller_registration_text(r: ControllerRegistration) -> str:
    """Kafka's ``ControllerRegistration.toString``."""
    return (f"ControllerRegistration(id={r.id}, incarnationId={r.incarnation_id}, "
            f"zkMigrationReady={_java_str(r.zk_migration_ready)}, listeners={_listeners(r.listeners)}, "
            f"supportedFeatures={_features(r.supported_features)})")


def java_double(x: float) -> str:
    """``Double.toString``: plain decimal with at least one fraction digit for 1e-3 <= |x| < 1e7,
    else ``d.dddE<exp>``; the shortest digits that read back as ``x`` (Java 19+ and Python agree on
    those)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    ax = abs(x)
    digits, exp = _shortest_digits(ax)
    if 1e-3 <= ax < 1e7:
        point = exp + 1  # digits before the decimal point
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    frac = digits[1:] or "0"
    return f"{sign}{digits[0]}.{frac}E{exp}"


def _shortest_digits(ax: float) -> tuple[str, int]:
    """(significant digits without trailing zeros, decimal exponent of the first digit), from
    ``repr`` (the shortest form that reads back as ``ax``)."""
    mantissa, _, exp_text = repr(ax).partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    digits = int_part + frac_part
    significant = digits.lstrip("0")
    first_exp = len(int_part) - 1 - (len(digits) - len(significant)) + (int(exp_text) if exp_text else 0)
    return significant.rstrip("0") or "0", first_exp


def utc_zoned_time(ms: int) -> str:
    """``DateTimeFormatter.ISO_ZONED_DATE_TIME`` of an epoch-millisecond time in zone ``UTC``:
    seconds always, the fraction only when not zero and without trailing zeros, then ``Z[UTC]``."""
    t = _EPOCH + timedelta(milliseconds=ms)
    text = t.strftime("%Y-%m-%dT%H:%M:%S")
    if t.year < 1000:  # strftime does not pad years below 1000 on every platform
        text = f"{t.year:04d}" + text[text.index("-"):]
    if t.microsecond:
        text += "." + f"{t.microsecond:06d}".rstrip("0")
    return text + "Z[UTC]"


def _field_text(kind: str, value: Any) -> str:
    if value is None:
        return "null"
    if kind == "str":
        return f"'{value}'"
    if kind == "bytes":
        return java_list(b - 256 if b > 127 else b for b in bytes(value))
    if kind == "float":
        return java_double(float(value))
    if kind.startswith("[]"):
        inner = kind[2:]
        return "[" + ", ".join(_field_text(inner, v) for v in value) + "]"
    if kind == "struct":
        return record_text(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Uuid):
        return str(value)
    return str(value)


def record_text(message: Any) -> str:
    """A generated record's Kafka ``toString``: ``TopicRecord(name='foo', topicId=...)``, every field
    in schema order, camelCase names, strings quoted, byte arrays as signed numbers."""
    spec = getattr(type(message), "_JSON", None)
    name = getattr(message, "NAME", type(message).__name__)
    if spec is None:
        return repr(message)
    parts = []
    for field in spec:
        attr, schema_name, kind = field[0], field[1], field[2]
        parts.append(f"{schema_name[:1].lower()}{schema_name[1:]}={_field_text(kind, getattr(message, attr))}")
    return f"{name}({', '.join(parts)})"
