"""CRC-32C (Castagnoli), the checksum of Kafka's v2 record batches.

``crc32c(data, crc=0)`` returns the CRC-32C of any C-contiguous buffer
(bytes, bytearray, memoryview, mmap, numpy array, ...), continuing from a
previous result ``crc`` so that ``crc32c(b, crc32c(a)) == crc32c(a + b)``;
the values are those of the ``crc32c`` PyPI package and of Kafka's
``Crc32C``.  A record batch's stored CRC is ``crc32c(batch[21:])``.

``impl()`` names the implementation this process uses, e.g.
``"native:vpclmul-avx2"`` (AVX2 + VPCLMULQDQ with SSE4.2 crc32 streams),
``"native:sse42-3way"``, ``"native:slice8"`` (portable C), or, with
``KRAFT_NO_EXTENSIONS=1`` or without the built extension,
``"pure:crc32c-package"`` / ``"pure:table"``.
"""
from kraft_storage._accel import load

_impl = load("_crc32c")

crc32c = _impl.crc32c
impl = _impl.impl

__all__ = ["crc32c", "impl"]
