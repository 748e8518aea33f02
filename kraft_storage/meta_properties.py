"""``meta.properties``: the identity file of every Kafka log directory.

The file is a Java ``Properties`` text file that Kafka writes with
``Properties.store(writer, "")`` through a temp file, fsync and atomic rename
(``PropertiesUtils.writePropertiesFile``)::

    #
    #Mon Apr 06 10:27:56 GMT 2026
    cluster.id=5L6g3nShT-eMCtK--X86sw
    directory.id=Teb3PFb009qvAZgMDEFH4g
    node.id=1
    version=1

Line 1 is the empty comment, line 2 the write time in ``Date.toString()``
form, then one ``key=value`` line per entry, ``\\n`` line ends, ISO-8859-1
with ``\\uXXXX`` escapes for anything else.  The *order* of the entries
depends on the JVM that wrote the file:

* JDK 18 and later sort the keys (JDK-8231640): Kafka 4.2's apache/kafka image.
* JDK 17 and earlier iterate the backing ConcurrentHashMap (16 bins, Java
  ``String.hashCode`` spread), e.g. ``node.id, directory.id, version,
  cluster.id`` as in every Kafka 3.x / 4.0 file we have.

``KeyOrder`` reproduces both, so a file Kafka wrote is rewritten byte for byte
when the same order, time and zone name are used (``MetaPropertiesFile.read``
records them).

Semantics (Kafka's ``MetaProperties``): version 0 is the ZooKeeper-era form
(``broker.id``), version 1 the KRaft form (``node.id`` required, ``cluster.id``
required, ``directory.id`` optional and a Kafka base64 Uuid).  ``cluster.id``
must be a Kafka base64 Uuid too (issue 19): :func:`read_meta_properties` refuses
anything else with the file name and the value (the byte codec,
:meth:`MetaPropertiesFile.parse`, does not: see
:meth:`MetaProperties.check_cluster_id`).  Unknown keys are kept and written back.
"""
from __future__ import annotations

import enum
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from kraft_storage.errors import KraftStorageError
from kraft_storage.fileio import atomic_write

FILE_NAME = "meta.properties"

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DATE_RE = re.compile(r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} \d\d \d\d:\d\d:\d\d (\S+) \d{4}$")


class MetaPropertiesError(KraftStorageError):
    """meta.properties is missing a required key, has a bad value, or cannot be parsed."""


class KeyOrder(enum.Enum):
    SORTED = "sorted"   # JDK 18+
    JDK17 = "jdk17"     # ConcurrentHashMap iteration order, JDK 9-17


def _java_hash(s: str) -> int:
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h


def _jdk17_order(keys: list[str]) -> list[str]:
    """Iteration order of a ``new Properties()`` (ConcurrentHashMap, table of 16).

    Bin = spread(hash) & (n - 1) with spread(h) = (h ^ (h >>> 16)) & 0x7fffffff;
    bins are walked in ascending order and a bin's list in insertion order.
    The table grows to 32 at 12 entries (0.75 load), so more keys re-spread.
    """
    n = 16
    while len(keys) > n * 3 // 4:
        n *= 2
    def spread(k: str) -> int:
        h = _java_hash(k)
        return ((h ^ (h >> 16)) & 0x7FFFFFFF) & (n - 1)
    return sorted(keys, key=lambda k: (spread(k), keys.index(k)))


def _escape(s: str, is_key: bool) -> str:
    """Java Properties.saveConvert (escUnicode=true)."""
    out = []
    for i, ch in enumerate(s):
        c = ord(ch)
        if ch == " ":
            out.append("\\ " if i == 0 or is_key else " ")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\f":
            out.append("\\f")
        elif ch in "=:#!\\":
            out.append("\\" + ch)
        elif c < 0x20 or c > 0x7E:
            if c > 0xFFFF:
                hi, lo = divmod(c - 0x10000, 0x400)
                out.append(f"\\u{0xD800 + hi:04X}\\u{0xDC00 + lo:04X}")
            else:
                out.append(f"\\u{c:04X}")
        else:
            out.append(ch)
    return "".join(out)


def _logical_lines(text: str) -> Iterator[str]:
    """Java Properties.load's line reader: skip comments/blank lines, join continuations."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while True:
            # a line continues when it ends with an odd number of backslashes
            stripped = line.rstrip("\\")
            if (len(line) - len(stripped)) % 2 == 1 and i <= len(lines):
                line = line[:-1] + (lines[i].lstrip(" \t\f") if i < len(lines) else "")
                i += 1
                if i > len(lines):
                    break
                continue
            break
        yield line


_ESC = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    out = []
    i = 0
    while i < len(s):
        ch = s[i]
        if ch == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "u":
                hexs = s[i + 2:i + 6]
                if len(hexs) != 4 or not all(c in "0123456789abcdefABCDEF" for c in hexs):
                    raise MetaPropertiesError(f"malformed \\uxxxx escape in {s!r}")
                out.append(chr(int(hexs, 16)))
                i += 6
                continue
            out.append(_ESC.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16")


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java Properties text (the subset of the format Kafka and users write)."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        # the key ends at the first unescaped '=', ':' or whitespace
        j = 0
        while j < len(line):
            if line[j] == "\\":
                j += 2
                continue
            if line[j] in "=: \t\f":
                break
            j += 1
        key = line[:j]
        rest = line[j:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        props[_unescape(key)] = _unescape(rest)
    return props


def java_date(epoch_s: float, zone: str = "UTC") -> str:
    """``java.util.Date.toString()`` for a UTC-offset-0 zone named ``zone``."""
    t = time.gmtime(epoch_s)
    return (f"{_DAYS[t.tm_wday]} {_MONTHS[t.tm_mon - 1]} {t.tm_mday:02d} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} {zone} {t.tm_year}")


def format_properties(props: dict[str, str], *, date_line: str, order: KeyOrder = KeyOrder.SORTED) -> bytes:
    """The exact bytes ``Properties.store(writer, "")`` produces."""
    keys = list(props)
    keys = sorted(keys) if order is KeyOrder.SORTED else _jdk17_order(keys)
    lines = ["#", "#" + date_line]
    lines += [f"{_escape(k, True)}={_escape(props[k], False)}" for k in keys]
    return ("\n".join(lines) + "\n").encode("utf-8")


@dataclass
class MetaProperties:
    """The identity of a log directory (Kafka's MetaProperties)."""
    version: int = 1
    cluster_id: str | None = None
    node_id: int | None = None
    directory_id: str | None = None
    other: dict[str, str] = field(default_factory=dict)

    def to_properties(self) -> dict[str, str]:
        props = dict(self.other)
        props["version"] = str(self.version)
        if self.cluster_id is not None:
            props["cluster.id"] = self.cluster_id
        if self.node_id is not None:
            props["node.id" if self.version == 1 else "broker.id"] = str(self.node_id)
        if self.directory_id is not None:
            props["directory.id"] = self.directory_id
        return props

    @classmethod
    def from_properties(cls, props: dict[str, str], source: str = FILE_NAME) -> "MetaProperties":
        props = dict(props)

        def need_int(key: str) -> int:
            if key not in props:
                raise MetaPropertiesError(f"{source}: failed to find {key}")
            try:
                return int(props.pop(key))
            except ValueError:
                raise MetaPropertiesError(f"{source}: unable to read {key} as a base-10 number") from None

        version = need_int("version")
        if version not in (0, 1):
            raise MetaPropertiesError(f"{source}: unknown meta.properties version {version}")
        cluster_id = props.pop("cluster.id", None)
        node_id: int | None
        if version == 1:
            if cluster_id is None:
                raise MetaPropertiesError(f"{source}: cluster.id was not found")
            node_id = need_int("node.id")
        else:
            node_id = need_int("broker.id") if "broker.id" in props else None
        directory_id = props.pop("directory.id", None)
        if directory_id is not None:
            from kraft_storage.messages.runtime import Uuid
            try:
                Uuid(directory_id)
            except Exception:
                raise MetaPropertiesError(f"{source}: directory.id {directory_id!r} is not a Kafka Uuid") from None
        if node_id is not None and node_id < 0:
            raise MetaPropertiesError(f"{source}: node id must be non-negative, got {node_id}")
        return cls(version, cluster_id, node_id, directory_id, props)

    def check_cluster_id(self, source: str = FILE_NAME) -> "MetaProperties":
        """Refuse a ``cluster.id`` that is not a Kafka base64 Uuid (Kafka's ``Uuid.fromString``:
        URL-safe base64, no padding, 16 bytes -- 22 characters), naming the file and the value.

        Why here and not in :meth:`from_properties`: a node sends its cluster id in every RPC
        and ``kafka-storage format`` only writes Uuids, so ``cluster.id=garbage!`` must stop a
        node at start (issue 19); but at least one real Kafka file has another form
        (kafka-fixtures' 3.7.0 sample, written by the bitnami image: ``q1w2e3r4t5y6u7i8o9p0``,
        20 characters), and the codec must still read and rewrite it byte for byte.  So
        :func:`read_meta_properties` (what nodes and tools use) checks by default and
        :meth:`MetaPropertiesFile.parse` (the byte codec) does not."""
        cid = self.cluster_id
        if cid is not None and not is_kafka_uuid(cid):
            raise MetaPropertiesError(
                f"{source}: cluster.id {cid!r} is not a Kafka base64 Uuid (22 characters of URL-safe base64 "
                "encoding 16 bytes, as `kraft-storage random-uuid` prints)")
        return self


@dataclass
class MetaPropertiesFile:
    """A meta.properties as found on disk: its contents and how it was written."""
    meta: MetaProperties
    date_line: str
    order: KeyOrder

    @classmethod
    def parse(cls, data: bytes, source: str = FILE_NAME) -> "MetaPropertiesFile":
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("latin-1")
        props = parse_properties(text)
        meta = MetaProperties.from_properties(props, source)
        lines = text.split("\n")
        date_line = lines[1][1:] if len(lines) > 1 and lines[1].startswith("#") else ""
        keys = [parse_properties(line).popitem()[0] for line in lines[2:]
                if line and line[0] not in "#!"]
        order = KeyOrder.SORTED if keys == sorted(keys) else KeyOrder.JDK17
        return cls(meta, date_line, order)

    def to_bytes(self) -> bytes:
        return format_properties(self.meta.to_properties(), date_line=self.date_line, order=self.order)


def is_kafka_uuid(text: str) -> bool:
    """Kafka's ``Uuid.fromString`` accepts it (the codec runtime's parser is as strict)."""
    from kraft_storage.messages.runtime import Uuid
    try:
        Uuid(text)
    except ValueError:
        return False
    return True


def read_meta_properties(log_dir: str, *, check_cluster_id: bool = True) -> MetaPropertiesFile:
    """Read ``log_dir/meta.properties``; with ``check_cluster_id`` (default) a cluster id
    that is not a Kafka base64 Uuid is refused (see :meth:`MetaProperties.check_cluster_id`)."""
    path = os.path.join(log_dir, FILE_NAME)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise MetaPropertiesError(f"{path}: not found (is the directory formatted? see kraft-storage format)") from None
    mf = MetaPropertiesFile.parse(data, path)
    if check_cluster_id:
        mf.meta.check_cluster_id(path)
    return mf


def write_meta_properties(log_dir: str, meta: MetaProperties, *, now_s: float | None = None,
                          zone: str = "UTC", order: KeyOrder = KeyOrder.SORTED, fsync: bool = True) -> str:
    """Write ``log_dir/meta.properties`` as Kafka does: temp file, fsync, atomic rename, dir fsync."""
    path = os.path.join(log_dir, FILE_NAME)
    date_line = java_date(time.time() if now_s is None else now_s, zone)
    atomic_write(path, format_properties(meta.to_properties(), date_line=date_line, order=order), sync=fsync)
    return path
