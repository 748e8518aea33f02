# cython: language_level=3
"""CRC-32C (Castagnoli) over any contiguous buffer, backed by ``csrc/crc32c.c``.

Same API and results as the twin ``kraft_storage._pure._crc32c``; import the
facade ``kraft_storage.crc32c`` rather than this module.

``crc32c(data, crc=0)`` has the semantics of the ``crc32c`` PyPI package's
``crc32c.crc32c(data, value=crc)``: ``crc`` is a previous finished CRC, so
``crc32c(b, crc32c(a)) == crc32c(a + b)``.  Kafka's record batch CRC is
``crc32c(batch[21:])``.

Why the buffer is taken with ``PyObject_GetBuffer(PyBUF_SIMPLE)`` instead of a
``const unsigned char[::1]`` typed memoryview: the simple request accepts
every C-contiguous buffer whatever its item format (a numpy ``int64`` array is
hashed as its bytes, as the ``crc32c`` package does), and costs roughly a
third of a typed-memoryview acquisition, which matters for the many small
(< 1 KiB) batches of a metadata log.  Read-only buffers (bytes, mmap opened
read-only) are fine since nothing is written.

The GIL is released for inputs of at least ``GIL_RELEASE_MIN`` bytes, where
the checksum takes longer than the release/reacquire round trip; the buffer
export stays held meanwhile, so a ``bytearray`` cannot be resized under us.
"""
from cpython.buffer cimport PyBuffer_Release, PyBUF_SIMPLE
from cpython.exc cimport PyErr_Clear
from cpython.number cimport PyNumber_Index
from libc.stdint cimport uint32_t

cdef extern from "Python.h":
    # Declared without Cython's ``except -1`` so that a failure can be turned
    # into this module's uniform TypeError/BufferError (see _buffer_error).
    int _get_buffer "PyObject_GetBuffer" (object obj, Py_buffer *view, int flags)

cdef extern from "crc32c.h" nogil:
    uint32_t kr_crc32c(uint32_t crc, const void *buf, size_t len)
    const char *kr_crc32c_impl()
    uint32_t kr_crc32c_portable(uint32_t crc, const void *buf, size_t len)
    const char *kr_crc32c_kernel_name(int which)
    int kr_crc32c_kernel_available(int which)
    uint32_t kr_crc32c_kernel(int which, uint32_t crc, const void *buf, size_t len)
    int KR_CRC32C_NKERNELS

#: Inputs at least this long are checksummed without holding the GIL
#: (~2 microseconds of work at 30 GB/s).
GIL_RELEASE_MIN = 65536
cdef Py_ssize_t _gil_release_min = GIL_RELEASE_MIN


cdef uint32_t _crc_arg(object crc) except? 0:
    """Validate the running CRC: an int in 0..0xFFFFFFFF (TypeError / ValueError otherwise)."""
    cdef long long v
    value = crc
    if type(value) is not int:  # floats must not be truncated silently
        try:
            value = PyNumber_Index(value)
        except TypeError:
            raise TypeError(
                f"an integer is required for crc, not {type(crc).__name__!r}") from None
    try:
        v = value
    except OverflowError:
        v = -1
    if v < 0 or v > 0xFFFFFFFF:
        raise ValueError(f"crc must be an int in 0..0xFFFFFFFF, got {crc!r}")
    return <uint32_t>v


def _buffer_error(data):
    """Return the exception for ``data`` that cannot be taken as a contiguous buffer.

    Kept identical to ``kraft_storage._pure._crc32c._buffer_error`` (tested):
    TypeError for objects without the buffer protocol, BufferError for
    non-C-contiguous buffers, and the object's own error otherwise (e.g. a
    closed mmap or a released memoryview).
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


cdef inline int _acquire(object data, Py_buffer *view) except -1:
    if _get_buffer(data, view, PyBUF_SIMPLE) == 0:
        return 0
    PyErr_Clear()  # replaced by the uniform error below (which re-derives the cause)
    raise _buffer_error(data)


def crc32c(data, crc=0):
    """CRC-32C of ``data`` (any C-contiguous buffer), continuing from ``crc``."""
    cdef uint32_t c = _crc_arg(crc)
    cdef Py_buffer view
    _acquire(data, &view)
    if view.len >= _gil_release_min:
        with nogil:
            c = kr_crc32c(c, view.buf, <size_t>view.len)
    else:
        c = kr_crc32c(c, view.buf, <size_t>view.len)
    PyBuffer_Release(&view)
    return c


def crc32c_portable(data, crc=0):
    """Same as :func:`crc32c` but always with the portable slicing-by-8 kernel."""
    cdef uint32_t c = _crc_arg(crc)
    cdef Py_buffer view
    _acquire(data, &view)
    with nogil:
        c = kr_crc32c_portable(c, view.buf, <size_t>view.len)
    PyBuffer_Release(&view)
    return c


def impl():
    """Name of the kernel in use: ``"native:vpclmul-avx2"``, ``"native:sse42-3way"`` or ``"native:slice8"``."""
    return "native:" + kr_crc32c_impl().decode("ascii")


def _kernels():
    """Names of the kernels this CPU can run (for tests and benchmarks)."""
    return [kr_crc32c_kernel_name(i).decode("ascii")
            for i in range(KR_CRC32C_NKERNELS) if kr_crc32c_kernel_available(i)]


def _crc32c_kernel(str name, data, crc=0):
    """CRC-32C with the named kernel (ValueError if unknown or unsupported here)."""
    cdef int which
    try:
        which = _KERNEL_IDS[name]
    except KeyError:
        raise ValueError(
            f"CRC-32C kernel {name!r} is not available (have {_kernels()})") from None
    cdef uint32_t c = _crc_arg(crc)
    cdef Py_buffer view
    _acquire(data, &view)
    with nogil:
        c = kr_crc32c_kernel(which, c, view.buf, <size_t>view.len)
    PyBuffer_Release(&view)
    return c


#: kernel name -> number, for the kernels this CPU can run.
_KERNEL_IDS = {kr_crc32c_kernel_name(i).decode("ascii"): i
               for i in range(KR_CRC32C_NKERNELS) if kr_crc32c_kernel_available(i)}
