"""Kafka's ``ConfigDef`` machinery: config types, Java-exact parsing, validators, keys, defs.

Why Java-exact: a config value is text on the wire and in ``ConfigRecord``; Kafka's brokers and
clients parse it with ``ConfigDef.parseType`` (``Integer.parseInt``, ``Double.parseDouble``,
``COMMA_WITH_WHITESPACE``...) and quote it back in ``ConfigException`` messages
(``"Invalid value X for configuration Y: <reason>"``).  A kraft controller must accept exactly
the values a Kafka broker accepts (or a record it wrote would not load there, and the reverse),
and a client reading the error must see Kafka's text.  So parsing follows Java's grammars, not
Python's (``int("1_0")``, ``float("nan")``, ``" 1"`` would all differ), and numbers are printed
as Java prints them (``Double.toString``: ``1.0E10``, ``0.5``; ``List.toString``: ``[a, b]``).

Value model (``ConfigDef.parse`` output): INT/SHORT/LONG -> ``int``, DOUBLE -> ``float``,
BOOLEAN -> ``bool``, STRING/PASSWORD -> ``str``, LIST -> ``tuple[str, ...]``, CLASS -> ``str``
(the class name: kraft cannot load Java classes, so any non-empty trimmed name is kept as
given).  Defaults are stored in this parsed form; ``None`` is Kafka's ``null`` default.

Invariants: every key's default passes its own validator (checked by :meth:`ConfigDef.define`,
as Kafka's ``ConfigKey`` constructor does); a :class:`ConfigDef` keeps definition order, which
is the order ``parse`` validates in (so the first error reported is Kafka's).
"""
from __future__ import annotations

import abc
import enum
import functools
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Iterator, Mapping

__all__ = [
    "ConfigType", "ConfigError", "NO_DEFAULT", "Validator", "Range", "ValidString", "ValidList",
    "GzipLevel", "ThrottledReplicaList", "ConfigKey", "ConfigDef", "ConfigSynonym",
    "HOURS_TO_MILLISECONDS", "MINUTES_TO_MILLISECONDS", "IDENTITY",
    "parse_type", "convert_to_string", "java_str", "java_double_str", "java_split",
    "parse_java_int", "parse_java_boolean",
]

INT_MIN, INT_MAX = -(2 ** 31), 2 ** 31 - 1
LONG_MIN, LONG_MAX = -(2 ** 63), 2 ** 63 - 1
SHORT_MIN, SHORT_MAX = -(2 ** 15), 2 ** 15 - 1


class ConfigType(enum.Enum):
    """``ConfigDef.Type``; ``describe_id`` is DescribeConfigsResponse's ConfigType byte."""
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9

    @property
    def describe_id(self) -> int:
        return self.value

    @property
    def is_sensitive(self) -> bool:
        """Kafka's ``Type.isSensitive``: only PASSWORD values are hidden."""
        return self is ConfigType.PASSWORD


class ConfigError(Exception):
    """Kafka's ``ConfigException``: answered as INVALID_CONFIG with ``message``.

    ``ConfigError.invalid(name, value, reason)`` builds Kafka's
    ``"Invalid value <value> for configuration <name>: <reason>"`` (value printed as Java would)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    @classmethod
    def invalid(cls, name: str, value: object, reason: str | None = None) -> ConfigError:
        text = f"Invalid value {java_str(value)} for configuration {name}"
        return cls(text if reason is None else f"{text}: {reason}")


# --------------------------------------------------------------------------- Java text semantics

_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_JAVA_DEC = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)")
_JAVA_HEX = re.compile(r"([+-]?)0[xX]((?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?")
#: ConfigDef.COMMA_WITH_WHITESPACE
_COMMA_WITH_WHITESPACE = re.compile(r"\s*,\s*")


def parse_java_int(text: str, lo: int = INT_MIN, hi: int = INT_MAX) -> int:
    """``Integer.parseInt`` / ``Long.parseLong`` / ``Short.parseShort`` (by bounds): an optional
    sign and ASCII digits, in range; ValueError otherwise (Java's NumberFormatException)."""
    if not _JAVA_INT.fullmatch(text):
        raise ValueError(f"For input string: \"{text}\"")
    value = int(text)
    if not lo <= value <= hi:
        raise ValueError(f"Value out of range. Value:\"{text}\"")
    return value


def parse_java_double(text: str) -> float:
    """``Double.parseDouble``: decimal (optional exponent, optional f/F/d/D suffix), ``NaN``,
    ``Infinity`` and hexadecimal floating literals; ValueError otherwise.  Java trims the text."""
    text = text.strip()
    hexm = _JAVA_HEX.fullmatch(text)
    if hexm:
        value = float.fromhex("0x" + hexm.group(2))
        return -value if hexm.group(1) == "-" else value
    if not _JAVA_DEC.fullmatch(text):
        raise ValueError(f"For input string: \"{text}\"")
    body = text.rstrip("fFdD") if not text.endswith("Infinity") else text
    if body.lstrip("+-") == "NaN":
        return math.nan
    if body.lstrip("+-") == "Infinity":
        return -math.inf if body.startswith("-") else math.inf
    return float(body)


def parse_java_boolean(text: str) -> bool | None:
    """``"true"``/``"false"`` in any case after trimming; None for anything else."""
    low = text.strip().lower()
    return True if low == "true" else False if low == "false" else None


def java_double_str(value: float) -> str:
    """``Double.toString``: plain decimal for 1e-3 <= |v| < 1e7 (at least one fraction digit),
    else ``d.dddE<exp>``; ``NaN``, ``Infinity``, ``-0.0`` as Java spells them."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0.0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    mag = abs(value)
    if 1e-3 <= mag < 1e7:
        text = repr(mag)  # shortest round-trip digits; never exponent form in this range
        return sign + (text if "." in text else text + ".0")
    digits_tuple = Decimal(repr(mag)).normalize().as_tuple()
    digits = "".join(str(d) for d in digits_tuple.digits)
    exponent = int(digits_tuple.exponent) + len(digits) - 1
    mantissa = digits[0] + "." + (digits[1:] or "0")
    return f"{sign}{mantissa}E{exponent}"


def java_str(value: object) -> str:
    """A value as Java's string concatenation prints it (``String.valueOf``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double_str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(java_str(v) for v in value) + "]"
    return str(value)


def java_split(text: str, sep: str = ",") -> list[str]:
    """``String.split(sep)`` for a literal separator: trailing empty strings are dropped, and a
    text without the separator is returned whole (so ``""`` gives ``[""]``, ``","`` gives ``[]``)."""
    if sep not in text:
        return [text]
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def parse_type(name: str, value: str, type_: ConfigType) -> Any:
    """``ConfigDef.parseType`` of a string value (the only form a ConfigRecord carries)."""
    trimmed = value.strip()
    try:
        if type_ is ConfigType.BOOLEAN:
            parsed = parse_java_boolean(trimmed)
            if parsed is None:
                raise ConfigError.invalid(name, value, "Expected value to be either true or false")
            return parsed
        if type_ in (ConfigType.STRING, ConfigType.PASSWORD):
            return trimmed
        if type_ is ConfigType.INT:
            return parse_java_int(trimmed)
        if type_ is ConfigType.SHORT:
            return parse_java_int(trimmed, SHORT_MIN, SHORT_MAX)
        if type_ is ConfigType.LONG:
            return parse_java_int(trimmed, LONG_MIN, LONG_MAX)
        if type_ is ConfigType.DOUBLE:
            return parse_java_double(trimmed)
        if type_ is ConfigType.LIST:
            return () if not trimmed else tuple(_COMMA_WITH_WHITESPACE.split(trimmed))
        if type_ is ConfigType.CLASS:
            if not trimmed:
                raise ConfigError.invalid(name, value, f"Class {value} could not be found.")
            return trimmed
    except ValueError:
        raise ConfigError.invalid(name, value, f"Not a number of type {type_.name}") from None
    raise AssertionError(f"unhandled config type {type_}")


def convert_to_string(parsed: Any, type_: ConfigType | None) -> str | None:
    """``ConfigDef.convertToString``: a parsed value back to its config text."""
    if parsed is None:
        return None
    if type_ is ConfigType.LIST or isinstance(parsed, (list, tuple)):
        return ",".join(java_str(v) for v in parsed)
    return java_str(parsed)


# --------------------------------------------------------------------------- validators

class Validator(abc.ABC):
    """``ConfigDef.Validator``: ``ensure_valid`` raises :class:`ConfigError`; ``str()`` is
    Kafka's "Valid Values" text."""

    @abc.abstractmethod
    def ensure_valid(self, name: str, value: Any) -> None:
        """Raise :class:`ConfigError` when ``value`` (parsed) is not valid for ``name``."""


def _number_str(n: int | float) -> str:
    return java_double_str(n) if isinstance(n, float) else str(n)


@dataclass(frozen=True)
class Range(Validator):
    """``Range.atLeast(min)`` / ``Range.between(min, max)`` (inclusive, compared as doubles)."""
    min: int | float | None = None
    max: int | float | None = None

    @classmethod
    def at_least(cls, lo: int | float) -> Range:
        return cls(lo, None)

    @classmethod
    def between(cls, lo: int | float, hi: int | float) -> Range:
        return cls(lo, hi)

    def ensure_valid(self, name: str, value: Any) -> None:
        if value is None:
            raise ConfigError.invalid(name, None, "Value must be non-null")
        if self.min is not None and float(value) < float(self.min):
            raise ConfigError.invalid(name, value, f"Value must be at least {_number_str(self.min)}")
        if self.max is not None and float(value) > float(self.max):
            raise ConfigError.invalid(name, value, f"Value must be no more than {_number_str(self.max)}")

    def __str__(self) -> str:
        lo = "" if self.min is None else _number_str(self.min)
        hi = "" if self.max is None else _number_str(self.max)
        if self.min is None and self.max is None:
            return "[...]"
        if self.min is None:
            return f"[...,{hi}]"
        if self.max is None:
            return f"[{lo},...]"
        return f"[{lo},...,{hi}]"


@dataclass(frozen=True)
class ValidString(Validator):
    """``ValidString.in(...)``: the value must be one of ``valid`` (case-sensitive)."""
    valid: tuple[str, ...]

    def ensure_valid(self, name: str, value: Any) -> None:
        if value not in self.valid:
            raise ConfigError.invalid(name, value, "String must be one of: " + ", ".join(self.valid))

    def __str__(self) -> str:
        return "[" + ", ".join(self.valid) + "]"


@dataclass(frozen=True)
class ValidList(Validator):
    """``ValidList.in(...)``: every element must be one of ``valid`` (an element's error quotes
    that element, as Kafka's delegation to ValidString does)."""
    valid: tuple[str, ...]

    def ensure_valid(self, name: str, value: Any) -> None:
        inner = ValidString(self.valid)
        for element in value:
            inner.ensure_valid(name, element)

    def __str__(self) -> str:
        return str(ValidString(self.valid))


@dataclass(frozen=True)
class GzipLevel(Validator):
    """``CompressionType.GZIP.levelValidator()``: 1..9, or -1 (Deflater's default level)."""
    min: int = 1
    max: int = 9
    default: int = -1

    def ensure_valid(self, name: str, value: Any) -> None:
        if value is None:
            raise ConfigError.invalid(name, None, "Value must be non-null")
        if value > self.max or (value < self.min and value != self.default):
            raise ConfigError.invalid(name, value, f"Value must be between {self.min} and {self.max} "
                                                   f"or equal to {self.default}")

    def __str__(self) -> str:
        return f"[{self.min},...,{self.max}] or {self.default}"


_THROTTLED_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")


@dataclass(frozen=True)
class ThrottledReplicaList(Validator):
    """``ThrottledReplicaListValidator``: ``*`` alone, or ``partition:broker`` pairs."""

    def ensure_valid(self, name: str, value: Any) -> None:
        proposed = [str(v).strip() for v in value]
        if not (all(_THROTTLED_REPLICA.fullmatch(s) for s in proposed) or "".join(proposed) == "*"):
            raise ConfigError.invalid(name, value, f"{name} must be the literal '*' or a list of replicas in the "
                                                   "following format: [partitionId]:[brokerId],"
                                                   "[partitionId]:[brokerId],...")

    def __str__(self) -> str:
        return "[partitionId]:[brokerId],[partitionId]:[brokerId],..."


# --------------------------------------------------------------------------- keys and defs

class _NoDefault:
    """Kafka's ``ConfigDef.NO_DEFAULT_VALUE``: the key must be given."""

    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()


@dataclass(frozen=True)
class ConfigKey:
    """One defined key: name, type, parsed default (``None`` = null, ``NO_DEFAULT`` = required),
    validator, and a one-line documentation (Kafka's doc strings are not copied)."""
    name: str
    type: ConfigType
    default: Any
    validator: Validator | None = None
    documentation: str = ""

    @property
    def has_default(self) -> bool:
        return self.default is not NO_DEFAULT

    @functools.cached_property
    def default_string(self) -> str | None:
        """The default as config text (``ConfigDef.convertToString``), None when null or absent."""
        return convert_to_string(self.default, self.type) if self.has_default else None


@dataclass
class ConfigDef:
    """An ordered set of :class:`ConfigKey` (Kafka's ``ConfigDef``)."""
    keys: dict[str, ConfigKey] = field(default_factory=dict)

    def define(self, name: str, type_: ConfigType, default: Any = NO_DEFAULT, validator: Validator | None = None,
               documentation: str = "") -> ConfigDef:
        if name in self.keys:
            raise ValueError(f"Configuration {name} is defined twice.")
        if default is not NO_DEFAULT and default is not None:
            if type_ is ConfigType.LIST and isinstance(default, list):
                default = tuple(default)
            if validator is not None:
                validator.ensure_valid(name, default)  # Kafka validates defaults at definition
        self.keys[name] = ConfigKey(name, type_, default, validator, documentation)
        return self

    def extend(self, other: ConfigDef) -> ConfigDef:
        for key in other.keys.values():
            self.define(key.name, key.type, key.default, key.validator, key.documentation)
        return self

    def __contains__(self, name: object) -> bool:
        return name in self.keys

    def __iter__(self) -> Iterator[ConfigKey]:
        return iter(self.keys.values())

    def names(self) -> list[str]:
        return list(self.keys)

    def get(self, name: str) -> ConfigKey | None:
        return self.keys.get(name)

    def parse_value(self, key: ConfigKey, value: str | None, is_set: bool) -> Any:
        """``ConfigDef.parseValue``: the given text parsed, or the default; then validated."""
        if is_set:
            parsed = None if value is None else parse_type(key.name, value, key.type)
        elif not key.has_default:
            raise ConfigError(f"Missing required configuration \"{key.name}\" which has no default value.")
        else:
            parsed = key.default
        if key.validator is not None:
            key.validator.ensure_valid(key.name, parsed)
        return parsed

    def parse(self, props: Mapping[str, str | None]) -> dict[str, Any]:
        """``ConfigDef.parse``: every defined key (given or default), in definition order; keys
        of ``props`` this def does not define are ignored, as Kafka's parse ignores them."""
        return {key.name: self.parse_value(key, props.get(key.name), key.name in props) for key in self}


# --------------------------------------------------------------------------- synonyms

def _value_to_int(text: str | None) -> int:
    """``ConfigSynonym.valueToInt`` with default 0: unparseable text counts as 0 (Kafka logs it)."""
    if text is None or not text.strip():
        return 0
    try:
        return parse_java_int(text.strip())
    except ValueError:
        return 0


def IDENTITY(text: str) -> str:  # noqa: N802 - Kafka's Function.identity()
    return text


def HOURS_TO_MILLISECONDS(text: str) -> str:  # noqa: N802 - Kafka's constant name
    return str(_value_to_int(text) * 3_600_000)


def MINUTES_TO_MILLISECONDS(text: str) -> str:  # noqa: N802 - Kafka's constant name
    return str(_value_to_int(text) * 60_000)


@dataclass(frozen=True)
class ConfigSynonym:
    """A broker key standing for a topic key, with the unit conversion its value needs."""
    name: str
    converter: Callable[[str], str] = IDENTITY
