# Cython twin of kraft_storage.messages.runtime.Writer, included by the generated
# _messages_*.pyx / _rpc_*.pyx modules (hand-written, not generated).
#
# Same method names and bytes as the pure Writer; the generated encoders type
# their writer ``Writer`` so every field write is a C call that appends to the
# bytearray ``out`` in place (no struct.pack object, no bytearray concatenation).
#
# Rule that keeps the two twins interchangeable: the fast path takes exactly the
# values the pure Writer writes (exact ints in range, bools, Uuid, str, bytes-likes);
# anything else goes through the pure Writer's own code, so it fails -- or
# succeeds -- with the very same exception and message.
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize

from kraft_storage.messages.runtime import SPILL_MIN_BYTES as _SPILL_MIN, Writer as _PyWriter, Uuid as _Uuid

_py_writer_methods = _PyWriter.__dict__


cdef inline unsigned char* _grow(bytearray out, Py_ssize_t n) except NULL:
    """Extend ``out`` by ``n`` bytes; return where they start (bytearray over-allocates)."""
    cdef Py_ssize_t size = PyByteArray_GET_SIZE(out)
    PyByteArray_Resize(out, size + n)
    return <unsigned char*>PyByteArray_AS_STRING(out) + size


cdef inline void _put_be(unsigned char* p, uint64_t v, int n) noexcept nogil:
    cdef int i
    for i in range(n):
        p[n - 1 - i] = <unsigned char>(v & 0xFF)
        v >>= 8


@cython.final
cdef class Writer:
    """Appends Kafka primitives to the bytearray ``out`` (``getvalue()`` returns bytes).

    ``Writer(out)`` appends to an existing bytearray (the framing's buffer), so a
    native message can be written into a pure Writer's buffer without a copy."""
    cdef public bytearray out
    cdef public object spill   # None or a list: see the pure Writer

    def __cinit__(self, out=None, spill=None):
        self.out = bytearray() if out is None else out
        self.spill = spill

    cpdef bytes getvalue(self):
        return bytes(self.out)

    cdef inline int _fixed(self, object v, long long lo, long long hi, int n, str name) except -1:
        cdef long long x
        if type(v) is int or type(v) is bool:
            try:
                x = v
            except OverflowError:
                x = hi + 1  # out of range: the pure path below raises
            if lo <= x <= hi:
                _put_be(_grow(self.out, n), <uint64_t>x, n)
                return 0
        _py_writer_methods[name](self, v)  # the pure Writer's exact behaviour (and error)
        return 0

    cpdef int8(self, v):
        self._fixed(v, -0x80, 0x7F, 1, "int8")

    cpdef boolean(self, v):
        if v is True:
            _grow(self.out, 1)[0] = 1
        elif v is False:
            _grow(self.out, 1)[0] = 0
        else:
            _py_writer_methods["boolean"](self, v)

    cpdef int16(self, v):
        self._fixed(v, -0x8000, 0x7FFF, 2, "int16")

    cpdef uint16(self, v):
        self._fixed(v, 0, 0xFFFF, 2, "uint16")

    cpdef int32(self, v):
        self._fixed(v, -0x80000000, 0x7FFFFFFF, 4, "int32")

    cpdef uint32(self, v):
        self._fixed(v, 0, 0xFFFFFFFF, 4, "uint32")

    cpdef int64(self, v):
        cdef long long x
        if type(v) is int:
            try:
                x = v
            except OverflowError:
                _py_writer_methods["int64"](self, v)
                return
            _put_be(_grow(self.out, 8), <uint64_t>x, 8)
        else:
            _py_writer_methods["int64"](self, v)

    cpdef float64(self, v):
        _py_writer_methods["float64"](self, v)

    cpdef uuid(self, v):
        if type(v) is _Uuid:
            self.out += (<object>v)._b
        else:
            _py_writer_methods["uuid"](self, v)

    cdef inline int _uvarint(self, unsigned long long v) except -1:
        cdef unsigned char* p
        if v < 0x80:
            _grow(self.out, 1)[0] = <unsigned char>v
            return 0
        cdef unsigned char tmp[10]
        cdef int n = 0
        while v >= 0x80:
            tmp[n] = <unsigned char>((v & 0x7F) | 0x80)
            v >>= 7
            n += 1
        tmp[n] = <unsigned char>v
        n += 1
        p = _grow(self.out, n)
        memcpy(p, tmp, n)
        return 0

    cpdef uvarint(self, v):
        if type(v) is int and 0 <= v <= 0xFFFFFFFF:
            self._uvarint(v)
        else:
            _py_writer_methods["uvarint"](self, v)

    cpdef string(self, v, nullable=False):
        _py_writer_methods["string"](self, v, nullable)

    cpdef compact_string(self, v, nullable=False):
        cdef bytes b
        if type(v) is str:
            b = (<str>v).encode("utf-8")
            if len(b) <= 0x7FFF:
                self._uvarint(len(b) + 1)
                self.out += b
                return
        _py_writer_methods["compact_string"](self, v, nullable)

    cpdef bytes_(self, v, nullable=False):
        _py_writer_methods["bytes_"](self, v, nullable)

    cpdef compact_bytes(self, v, nullable=False):
        if v is not None and (type(v) is bytes or type(v) is bytearray or type(v) is memoryview):
            self._uvarint(len(v) + 1)
            if self.spill is not None and len(v) >= _SPILL_MIN:
                self.spill.append((len(self.out), v))
            else:
                self.out += v
            return
        _py_writer_methods["compact_bytes"](self, v, nullable)

    cpdef array_len(self, v, nullable=False):
        return _py_writer_methods["array_len"](self, v, nullable)

    cpdef compact_array_len(self, v, nullable=False):
        if type(v) is list or type(v) is tuple:
            self._uvarint(len(v) + 1)
            return True
        return _py_writer_methods["compact_array_len"](self, v, nullable)

    cpdef raw(self, b):
        self.out += b

    cpdef check_unknown_tags(self, unknown, known_tags):
        _py_writer_methods["check_unknown_tags"](self, unknown, known_tags)

    cpdef tagged_fields(self, known, unknown):
        cdef object tag, data
        if not unknown and type(known) is list:
            self._uvarint(len(known))
            for tag, data in known:
                self.uvarint(tag)
                self.uvarint(len(data))
                self.out += data
            return
        _py_writer_methods["tagged_fields"](self, known, unknown)


cdef Writer _native_writer(object w):
    """The C-level Writer for ``w``: itself, or one sharing a pure Writer's buffer and spill."""
    if type(w) is Writer:
        return <Writer>w
    return Writer(w.out, getattr(w, "spill", None))
