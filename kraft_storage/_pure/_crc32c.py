"""Pure-Python twin of ``kraft_storage._native._crc32c`` (same API, same results).

CRC-32C (Castagnoli): reflected polynomial 0x82F63B78, init and final xor
0xFFFFFFFF, with the ``crc32c`` PyPI package's chaining convention: ``crc`` is
a previous *finished* CRC, so ``crc32c(b, crc32c(a)) == crc32c(a + b)``.

Two implementations live here, on purpose:

* :func:`crc32c_table` is the byte-at-a-time table algorithm written out in
  Python.  It is the reference oracle of the test-suite: short enough to check
  by eye against the definition, and independent of every C kernel.  It runs at
  a few MB/s, far too slow for multi-megabyte logs.
* :func:`crc32c` therefore delegates to the ``crc32c`` package (a C extension,
  a declared dependency of kraft) when it can be imported, and only falls back
  to :func:`crc32c_table` when it cannot.  :func:`impl` says which is in use.

So ``KRAFT_NO_EXTENSIONS=1`` means "none of kraft's own native code", not
"no native code at all".  :func:`crc32c_portable` is the table algorithm,
standing in for the native module's portable C kernel.

Arguments are checked exactly as the native module checks them: ``data`` must
be a C-contiguous buffer (TypeError if it is no buffer, BufferError if it is
not contiguous; any item format is read as its raw bytes), and ``crc`` an int
in 0..0xFFFFFFFF (TypeError / ValueError), where the ``crc32c`` package would
silently truncate.
"""
from __future__ import annotations

import operator

try:
    import crc32c as _pkg
except ImportError:  # pragma: no cover - the package is a declared dependency
    _pkg = None

#: Reversed Castagnoli polynomial (0x1EDC6F41 with its bits reflected).
POLY_REFLECTED = 0x82F63B78


def _make_table() -> tuple[int, ...]:
    """TABLE[b] = raw CRC state after feeding byte b into state 0."""
    table = []
    for byte in range(256):
        c = byte
        for _ in range(8):
            c = (c >> 1) ^ (POLY_REFLECTED if c & 1 else 0)
        table.append(c)
    return tuple(table)


TABLE = _make_table()


def _crc_arg(crc) -> int:
    """The running CRC as an int in 0..0xFFFFFFFF (TypeError / ValueError otherwise)."""
    try:
        v = operator.index(crc)
    except TypeError:
        raise TypeError(f"an integer is required for crc, not {type(crc).__name__!r}") from None
    if not 0 <= v <= 0xFFFFFFFF:
        raise ValueError(f"crc must be an int in 0..0xFFFFFFFF, got {crc!r}")
    return v


def _buffer_error(data) -> Exception:
    """Return the exception for ``data`` that cannot be read as a contiguous buffer.

    Identical to the native module's (tested): TypeError for objects without
    the buffer protocol, BufferError for non-C-contiguous buffers, and the
    object's own error otherwise (e.g. a closed mmap or a released memoryview).
    """
    try:
        view = memoryview(data)
    except TypeError:
        return TypeError(
            f"crc32c() data must be a bytes-like object, not {type(data).__name__!r}")
    except Exception as exc:  # the object's own reason, e.g. mmap closed
        return exc
    with view:
        if not view.c_contiguous:
            return BufferError(
                f"crc32c() data must be C-contiguous, got a non-contiguous "
                f"{type(data).__name__!r}")
    return BufferError(f"crc32c() cannot read the buffer of {type(data).__name__!r}")


def _bytes_view(data) -> memoryview:
    """``data`` as a flat memoryview of unsigned bytes, or the uniform error."""
    try:
        view = memoryview(data)
    except Exception:
        raise _buffer_error(data) from None
    if not view.c_contiguous:
        view.release()
        raise _buffer_error(data)
    return view.cast("B") if (view.format != "B" or view.ndim != 1) else view


def crc32c_table(data, crc: int = 0) -> int:
    """CRC-32C by the byte-at-a-time table algorithm (the reference oracle; slow)."""
    c = _crc_arg(crc) ^ 0xFFFFFFFF
    table = TABLE
    with _bytes_view(data) as view:
        for byte in view.tobytes():
            c = table[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


#: The portable kernel of this twin is the table algorithm itself.
crc32c_portable = crc32c_table


if _pkg is not None:
    _pkg_crc32c = _pkg.crc32c

    def crc32c(data, crc: int = 0) -> int:
        """CRC-32C of ``data`` (any C-contiguous buffer), continuing from ``crc``."""
        c = _crc_arg(crc)
        try:
            return _pkg_crc32c(data, c)
        except (TypeError, BufferError, ValueError):
            pass
        # Give the same error as the native module; a buffer the package
        # refused for another reason (format, ndim) is read as raw bytes.
        with _bytes_view(data) as view:
            return _pkg_crc32c(view, c)

    def impl() -> str:
        """Name of the implementation in use."""
        return "pure:crc32c-package"
else:  # pragma: no cover - exercised only without the crc32c package
    crc32c = crc32c_table

    def impl() -> str:
        """Name of the implementation in use."""
        return "pure:table"
