# Cython twin of kraft_storage.messages.runtime.Reader, included by the generated
# kraft_storage/_native/_messages_*.pyx modules (hand-written, not generated).
#
# Same method names and results as the pure Reader, so the generated decoding
# text compiles against either; here every method is a C-level call when the
# reader is typed ``Reader`` (the class is final).  All reads are bounds-checked
# against ``end`` and raise MessageError naming the byte position.
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

from kraft_storage.messages.runtime import _make_uuid

cdef extern from *:
    """
    /* object.__new__(cls) without the Python-level call: the generated decoders
       create every message this way and then set each slot. */
    static PyObject *kr_new_instance(PyObject *cls) {
        static PyObject *empty = NULL;
        if (empty == NULL) {
            empty = PyTuple_New(0);
            if (empty == NULL) return NULL;
        }
        return PyBaseObject_Type.tp_new((PyTypeObject *)cls, empty, NULL);
    }
    """
    object kr_new_instance(object cls)


cdef inline object _new(object cls):
    return kr_new_instance(cls)


cdef inline uint32_t _be32(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline uint64_t _be64(const unsigned char* p) noexcept nogil:
    return (<uint64_t>_be32(p) << 32) | <uint64_t>_be32(p + 4)


@cython.final
cdef class Reader:
    cdef readonly bytes buf
    cdef const unsigned char* p
    cdef public Py_ssize_t pos
    cdef public Py_ssize_t end

    def __cinit__(self, buf=b"", Py_ssize_t pos=0, end=None):
        if type(buf) is not bytes:
            buf = bytes(buf)
        self.buf = <bytes>buf
        self.p = <const unsigned char*>PyBytes_AS_STRING(self.buf)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(self.buf)
        self.end = n if end is None else <Py_ssize_t>end
        if self.end < 0 or self.end > n or pos < 0 or pos > self.end:
            raise ValueError("reader range outside the buffer")
        self.pos = pos

    def __init__(self, buf, Py_ssize_t pos=0, end=None):
        pass  # all set up by __cinit__ (declared so Python callers may pass arguments)

    def error(self, reason, position=None):
        return MessageError(reason, self.pos if position is None else position)

    cdef inline Py_ssize_t _need(self, Py_ssize_t n) except -1:
        cdef Py_ssize_t p = self.pos
        if n > self.end - p or n < 0:
            raise MessageError(f"truncated: {n} bytes needed, {self.end - p} left", p)
        self.pos = p + n
        return p

    cpdef Py_ssize_t remaining(self):
        return self.end - self.pos

    # -- fixed width
    cpdef int int8(self) except? -1:
        return <int8_t>self.p[self._need(1)]

    cpdef bint boolean(self) except? -1:
        return self.p[self._need(1)] != 0

    cpdef int int16(self) except? -1:
        cdef Py_ssize_t q = self._need(2)
        return <int16_t>((<uint16_t>self.p[q] << 8) | self.p[q + 1])

    cpdef int uint16(self) except? -1:
        cdef Py_ssize_t q = self._need(2)
        return (<uint16_t>self.p[q] << 8) | self.p[q + 1]

    cpdef int int32(self) except? -1:
        return <int32_t>_be32(self.p + self._need(4))

    cpdef long long uint32(self) except? -1:
        return _be32(self.p + self._need(4))

    cpdef long long int64(self) except? -1:
        return <int64_t>_be64(self.p + self._need(8))

    cpdef double float64(self) except? -1.0:
        cdef uint64_t bits = _be64(self.p + self._need(8))
        cdef double d
        memcpy(&d, &bits, 8)
        return d

    cpdef object uuid(self):
        cdef Py_ssize_t q = self._need(16)
        return _make_uuid(self.buf[q:q + 16])

    cpdef long long uvarint(self) except -1:
        cdef Py_ssize_t q = self.pos
        cdef uint64_t result = 0
        cdef int shift = 0
        cdef unsigned char b
        while True:
            if q >= self.end:
                raise MessageError("truncated varint", self.pos)
            b = self.p[q]
            q += 1
            result |= (<uint64_t>(b & 0x7F)) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 28:
                raise MessageError("malformed varint (more than 5 bytes)", self.pos)
        if result > 0xFFFFFFFF:
            raise MessageError("malformed varint (over 32 bits)", self.pos)
        self.pos = q
        return <long long>result

    # -- lengths
    cdef inline Py_ssize_t _length(self, long long n, bint nullable, str what, Py_ssize_t start) except -2:
        """-1 for null, else the checked length."""
        if n < 0:
            if n == -1 and nullable:
                return -1
            if n == -1:
                raise MessageError(f"null {what} in a non-nullable field", start)
            raise MessageError(f"negative {what} length {n}", start)
        if n > self.end - self.pos:
            raise MessageError(f"{what} length {n} exceeds the {self.end - self.pos} bytes left", start)
        return <Py_ssize_t>n

    cdef inline object _text(self, Py_ssize_t n, Py_ssize_t start):
        cdef Py_ssize_t q = self.pos
        self.pos = q + n
        try:
            return PyUnicode_DecodeUTF8(<const char*>(self.p + q), n, NULL)
        except UnicodeDecodeError as exc:
            raise MessageError(f"invalid UTF-8 in string: {exc.reason}", start) from None

    cpdef object string(self, bint nullable=False):
        cdef Py_ssize_t start = self.pos
        cdef Py_ssize_t n = self._length(self.int16(), nullable, "string", start)
        return None if n < 0 else self._text(n, start)

    cpdef object compact_string(self, bint nullable=False):
        cdef Py_ssize_t start = self.pos
        cdef Py_ssize_t n = self._length(self.uvarint() - 1, nullable, "string", start)
        return None if n < 0 else self._text(n, start)

    cpdef object bytes_(self, bint nullable=False):
        cdef Py_ssize_t start = self.pos
        cdef Py_ssize_t n = self._length(self.int32(), nullable, "bytes", start)
        if n < 0:
            return None
        cdef Py_ssize_t q = self.pos
        self.pos = q + n
        return self.buf[q:q + n]

    cpdef object compact_bytes(self, bint nullable=False):
        cdef Py_ssize_t start = self.pos
        cdef Py_ssize_t n = self._length(self.uvarint() - 1, nullable, "bytes", start)
        if n < 0:
            return None
        cdef Py_ssize_t q = self.pos
        self.pos = q + n
        return self.buf[q:q + n]

    cpdef object array_len(self, bint nullable=False):
        cdef Py_ssize_t start = self.pos
        cdef Py_ssize_t n = self._length(self.int32(), nullable, "array", start)
        return None if n < 0 else n

    cpdef object compact_array_len(self, bint nullable=False):
        cdef Py_ssize_t start = self.pos
        cdef Py_ssize_t n = self._length(self.uvarint() - 1, nullable, "array", start)
        return None if n < 0 else n

    cpdef list int32_array(self, Py_ssize_t n):
        cdef Py_ssize_t q = self._need(4 * n)
        cdef list out = PyList_New(n)
        cdef Py_ssize_t i
        cdef object v
        for i in range(n):
            v = <int32_t>_be32(self.p + q + 4 * i)
            Py_INCREF(v)
            PyList_SET_ITEM(out, i, v)
        return out

    cpdef bytes raw(self, Py_ssize_t n):
        cdef Py_ssize_t q = self._need(n)
        return self.buf[q:q + n]

    cpdef bytes raw_to(self, Py_ssize_t end):
        cdef Py_ssize_t q = self.pos
        if not (q <= end <= self.end):
            raise MessageError("bad raw range", q)
        self.pos = end
        return self.buf[q:end]

    # -- tagged fields
    cpdef long long tag_count(self) except -1:
        return self.uvarint()

    cpdef tuple tag_header(self, long long last_tag):
        cdef Py_ssize_t start = self.pos
        cdef long long tag = self.uvarint()
        if tag <= last_tag:
            raise MessageError(f"tagged field {tag} out of order (after tag {last_tag})", start)
        cdef long long size = self.uvarint()
        if size > self.end - self.pos:
            raise MessageError(f"tagged field {tag} size {size} exceeds the {self.end - self.pos} bytes left", start)
        return tag, self.pos + size

    cpdef tag_end(self, long long tag, Py_ssize_t end):
        if self.pos != end:
            raise MessageError(f"tagged field {tag} value does not fill its declared size", self.pos)

    def expect_end(self):
        if self.pos != self.end:
            raise MessageError(f"{self.end - self.pos} unexpected trailing bytes", self.pos)


cdef Reader _reader(object buf):
    """Fast construction for the generated code: whole buffer, no argument parsing."""
    cdef Reader r = Reader.__new__(Reader)
    if type(buf) is not bytes:
        buf = bytes(buf)
    r.buf = <bytes>buf
    r.p = <const unsigned char*>PyBytes_AS_STRING(r.buf)
    r.pos = 0
    r.end = PyBytes_GET_SIZE(r.buf)
    return r
