"""Compression codecs for record batches, as Kafka frames them.

A compressed batch compresses its whole records section (everything after
the 61-byte header) as one stream:

* gzip: an RFC 1952 gzip stream (Java's GZIPOutputStream).
* snappy: xerial snappy-java's *framed* stream (Kafka's SnappyOutputStream):
  an 8-byte magic ``\\x82SNAPPY\\x00``, int32 version, int32 min-compatible
  version, then blocks of int32 big-endian length + raw snappy block.
  (Plain unframed snappy is also accepted on read, as the Java reader does.)
* lz4: the LZ4 frame format (KafkaLZ4BlockOutputStream, magic >= 1).
* zstd: a zstd frame.

gzip and zstd always work.  lz4 needs the ``lz4`` package, snappy needs
``cramjam``; without them those codecs raise :class:`UnsupportedCompression`.

Decompression is bounded (``MAX_DECOMPRESSED``) so a hostile batch cannot make
us allocate without limit.
"""
from __future__ import annotations

import os
import struct
import threading
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar, cast

import zstandard

from kraft_storage.errors import UnsupportedCompression
from kraft_storage.record.constants import Compression

#: Upper bound on one batch's decompressed records section.
MAX_DECOMPRESSED = 1 << 30

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_BLOCK = 32 * 1024

_local = threading.local()

#: Batches are compressed/decompressed on this many threads when there are
#: enough of them (zstd, zlib and lz4 release the GIL while they work).
WORKERS = max(1, min(8, os.cpu_count() or 1))
_PARALLEL_MIN_BYTES = 1 << 20
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()

_T = TypeVar("_T")
_R = TypeVar("_R")

if TYPE_CHECKING:
    from typing import Protocol

    class _Lz4Frame(Protocol):
        """What this module uses of ``lz4.frame`` (the package ships no type information)."""

        def compress(self, data: bytes) -> bytes: ...

        def decompress(self, data: bytes) -> bytes: ...


def _zstd_compressor() -> zstandard.ZstdCompressor:
    # zstandard objects are not safe to share between threads: one per thread.
    c = getattr(_local, "zc", None)
    if c is None:
        c = _local.zc = zstandard.ZstdCompressor(level=3)  # Kafka's default zstd level
    compressor: zstandard.ZstdCompressor = c
    return compressor


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_local, "zd", None)
    if d is None:
        d = _local.zd = zstandard.ZstdDecompressor()
    decompressor: zstandard.ZstdDecompressor = d
    return decompressor


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="kraft-codec")
        return _pool


class DecompressionError(ValueError):
    """The compressed stream is malformed or larger than MAX_DECOMPRESSED."""


def _lz4() -> _Lz4Frame:
    try:
        import lz4.frame  # type: ignore[import-untyped]  # lz4 ships no type information
        return cast("_Lz4Frame", lz4.frame)
    except ImportError:
        raise UnsupportedCompression(
            "lz4 batches need the optional 'lz4' package (pip install 'kraft[compression]')") from None


def _snappy() -> Any:  # cramjam.snappy: a native submodule
    try:
        import cramjam
        return cramjam.snappy
    except ImportError:
        raise UnsupportedCompression(
            "snappy batches need the optional 'cramjam' package (pip install 'kraft[compression]')") from None


def compress(codec: int, data: bytes) -> bytes:
    codec = Compression(codec)
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return c.compress(data) + c.flush()
    if codec == Compression.ZSTD:
        return _zstd_compressor().compress(data)
    if codec == Compression.LZ4:
        return _lz4().compress(bytes(data))
    if codec == Compression.SNAPPY:
        snappy = _snappy()
        out = bytearray(_XERIAL_MAGIC + struct.pack(">ii", 1, 1))
        mv = memoryview(data)
        for i in range(0, len(mv), _XERIAL_BLOCK):
            block = bytes(snappy.compress_raw(bytes(mv[i:i + _XERIAL_BLOCK])))
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    raise UnsupportedCompression(f"unknown compression codec id {int(codec)}")


def decompress(codec: int, data: Any, limit: int = MAX_DECOMPRESSED) -> bytes:
    """Decompress one batch's records section; raise DecompressionError on bad data."""
    try:
        codec = Compression(codec)
    except ValueError:
        raise UnsupportedCompression(f"unknown compression codec id {codec}") from None
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = d.decompress(bytes(data), limit + 1)
            if len(out) > limit:
                raise DecompressionError(f"decompressed size exceeds {limit} bytes")
            if not d.eof:
                raise DecompressionError("gzip stream is truncated")
            return out
        if codec == Compression.ZSTD:
            size = zstandard.frame_content_size(data)
            if 0 <= size <= limit:  # size in the frame header: one call, exact allocation
                return _zstd_decompressor().decompress(data)
            acc = bytearray()
            with _zstd_decompressor().stream_reader(bytes(data), read_across_frames=True) as r:
                while True:
                    chunk = r.read(1 << 20)
                    if not chunk:
                        break
                    acc += chunk
                    if len(acc) > limit:
                        raise DecompressionError(f"decompressed size exceeds {limit} bytes")
            return bytes(acc)
        if codec == Compression.LZ4:
            out = _lz4().decompress(bytes(data))
            if len(out) > limit:
                raise DecompressionError(f"decompressed size exceeds {limit} bytes")
            return out
        if codec == Compression.SNAPPY:
            return _snappy_decompress(bytes(data), limit)
    except (UnsupportedCompression, DecompressionError):
        raise
    except Exception as exc:  # zlib.error, zstd.ZstdError, lz4 RuntimeError, ...
        raise DecompressionError(f"{codec.name.lower()} stream is malformed: {exc}") from None
    raise UnsupportedCompression(f"unknown compression codec id {int(codec)}")


def _snappy_decompress(data: bytes, limit: int) -> bytes:
    snappy = _snappy()
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(snappy.decompress_raw(data))
    pos = 16
    out = bytearray()
    while pos < len(data):
        if pos + 4 > len(data):
            raise DecompressionError("snappy block length is truncated")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise DecompressionError(f"snappy block of {n} bytes runs past the stream")
        out += bytes(snappy.decompress_raw(data[pos:pos + n]))
        pos += n
        if len(out) > limit:
            raise DecompressionError(f"decompressed size exceeds {limit} bytes")
    return bytes(out)


def _parallel(fn: Callable[[_T], _R], items: Sequence[_T], total_bytes: int) -> list[_R]:
    if WORKERS == 1 or len(items) < 4 or total_bytes < _PARALLEL_MIN_BYTES:
        return [fn(x) for x in items]
    return list(_executor().map(fn, items, chunksize=max(1, len(items) // (WORKERS * 4))))


def compress_many(codec: int, bodies: Sequence[bytes]) -> list[bytes]:
    """Compress each body with ``codec``, on several threads when worthwhile."""
    return _parallel(lambda b: compress(codec, b), bodies, sum(len(b) for b in bodies))


def decompress_many(jobs: Sequence[tuple[int, Any]], limit: int = MAX_DECOMPRESSED) -> list[bytes | Exception]:
    """Decompress ``(codec, data)`` jobs; returns bytes or the exception, per job, in order."""
    def one(job: tuple[int, Any]) -> bytes | Exception:
        try:
            return decompress(job[0], job[1], limit)
        except (UnsupportedCompression, DecompressionError) as exc:
            return exc
    return _parallel(one, jobs, sum(len(j[1]) for j in jobs))
