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
from typing import TYPE_CHECKING, cast

from kraft_storage.accel import load

if TYPE_CHECKING:
    from kraft_storage._contracts import Crc32cKernel

_impl = cast("Crc32cKernel", load("_crc32c"))

crc32c = _impl.crc32c
impl = _impl.impl

__all__ = ["crc32c", "impl"]
