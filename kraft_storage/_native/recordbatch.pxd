# Cython declarations of csrc/recordbatch.h, shared by every extension that
# calls the record-batch kernels (_batch, _logappend), so the C struct layout
# is declared once.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t

cdef extern from "recordbatch.h":
    ctypedef struct kr_error:
        int code
        int64_t position
        int64_t base_offset
        char message[200]

    ctypedef struct kr_batch_header:
        int64_t position
        int64_t base_offset
        int64_t base_timestamp
        int64_t max_timestamp
        int64_t producer_id
        int32_t size
        int32_t last_offset_delta
        int32_t partition_leader_epoch
        int32_t base_sequence
        int32_t records_count
        uint32_t crc
        int16_t attributes
        int16_t producer_epoch
        int8_t magic
        int8_t crc_valid
        int16_t _pad

    int kr_scan_batches(const uint8_t *buf, int64_t start, int64_t end, int crc_mode,
                        int64_t max_batch_size, kr_batch_header *out, int64_t cap,
                        int64_t *n_out, int64_t *next_pos, kr_error *err) nogil
