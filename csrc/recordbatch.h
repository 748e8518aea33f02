/*
 * Kafka record batch v2 (magic 2) kernels: scan, decode into columns, encode.
 *
 * Batch header layout (big-endian, 61 bytes, offsets from the batch start):
 *
 *    0  baseOffset            int64
 *    8  batchLength           int32   bytes after this field (size - 12)
 *   12  partitionLeaderEpoch  int32
 *   16  magic                 int8    = 2
 *   17  crc                   uint32  CRC-32C of bytes [21, size)
 *   21  attributes            int16   bits 0-2 compression, 3 timestamp type,
 *                                      4 transactional, 5 control, 6 delete horizon
 *   23  lastOffsetDelta       int32
 *   27  baseTimestamp         int64
 *   35  maxTimestamp          int64
 *   43  producerId            int64
 *   51  producerEpoch         int16
 *   53  baseSequence          int32
 *   57  recordsCount          int32
 *   61  records...            (compressed as one stream when bits 0-2 != 0)
 *
 * Record layout (zig-zag varints as in protobuf):
 *   varint length (bytes after this field), int8 attributes,
 *   varlong timestampDelta, varint offsetDelta,
 *   varint keyLength (-1 = null), key, varint valueLength (-1 = null), value,
 *   varint headersCount, then per header:
 *   varint keyLength (>= 0), key (UTF-8), varint valueLength (-1 = null), value.
 *
 * Every function bounds-checks against the buffer length it is given; none
 * reads or writes outside it whatever the input bytes say.  Errors are
 * reported through kr_error with the byte position and a message.
 */
#ifndef KRAFT_RECORDBATCH_H
#define KRAFT_RECORDBATCH_H

#include <stddef.h>
#include <stdint.h>

#define KR_LOG_OVERHEAD 12          /* baseOffset + batchLength */
#define KR_HEADER_SIZE 61           /* full v2 batch header */
#define KR_CRC_OFFSET 17
#define KR_ATTRIBUTES_OFFSET 21
#define KR_RECORDS_COUNT_OFFSET 57
#define KR_MIN_RECORD_SIZE 7        /* 1-byte varints everywhere, no key/value/headers */

enum kr_status {
    KR_OK = 0,
    KR_E_TRUNCATED = 1,   /* buffer ends inside a batch: a partial (torn) tail */
    KR_E_CORRUPT = 2,     /* malformed bytes */
    KR_E_CAPACITY = 3,    /* output arrays full: call again with more room */
};

/* CRC handling while scanning. */
enum kr_crc_mode {
    KR_CRC_SKIP = 0,      /* do not compute (crc_valid = -1) */
    KR_CRC_VERIFY = 1,    /* compute, stop with KR_E_CORRUPT on mismatch */
    KR_CRC_REPORT = 2,    /* compute, record crc_valid, keep going */
};

typedef struct {
    int code;
    int64_t position;       /* byte position of the problem (batch start or record) */
    int64_t base_offset;    /* base offset of the batch, or INT64_MIN if unknown */
    char message[200];
} kr_error;

/* One row per batch: the columnar "batch index".  72 bytes, naturally
 * aligned; kraft_storage.record.BATCH_DTYPE mirrors it (align=True). */
typedef struct {
    int64_t position;             /* byte position of the batch in the buffer */
    int64_t base_offset;
    int64_t base_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int32_t size;                 /* whole batch in bytes: batchLength + 12 */
    int32_t last_offset_delta;
    int32_t partition_leader_epoch;
    int32_t base_sequence;
    int32_t records_count;
    uint32_t crc;
    int16_t attributes;
    int16_t producer_epoch;
    int8_t magic;
    int8_t crc_valid;             /* 1 valid, 0 invalid, -1 not checked */
    int16_t _pad;
} kr_batch_header;

/* Walk batches in buf[start, end).  Fills up to cap rows of out, sets *n_out
 * and *next_pos (position after the last accepted batch).  Returns KR_OK when
 * end was reached exactly, KR_E_CAPACITY when out is full (resume from
 * *next_pos), KR_E_TRUNCATED when a batch runs past end, KR_E_CORRUPT on bad
 * bytes (err says what).  max_batch_size bounds batchLength + 12 (0 = 2^31-1). */
int kr_scan_batches(const uint8_t *buf, int64_t start, int64_t end, int crc_mode,
                    int64_t max_batch_size, kr_batch_header *out, int64_t cap,
                    int64_t *n_out, int64_t *next_pos, kr_error *err);

/* Output columns for decoded records (one entry per record). */
typedef struct {
    int64_t *offset;
    int64_t *timestamp;
    int64_t *key_pos;
    int32_t *key_len;         /* -1 = null */
    int64_t *value_pos;
    int32_t *value_len;       /* -1 = null */
    int64_t *headers_pos;     /* position of the first header (after the count) */
    int32_t *headers_count;
    int32_t *batch;           /* row index into the batch headers */
    int8_t *attributes;
} kr_record_columns;

/* Decode the records of nbatches batches.  hdr[i] gives base offset,
 * timestamps, attributes and records_count; the records of batch i occupy
 * buf[region_start[i], region_end[i]) (the decompressed stream for a
 * compressed batch).  Writes records into cols starting at row first_row;
 * cap is the capacity of the columns.  Each region must hold exactly
 * records_count records.  Returns KR_OK or KR_E_CORRUPT / KR_E_CAPACITY. */
int kr_decode_records(const uint8_t *buf, int64_t buflen, const kr_batch_header *hdr,
                      const int64_t *region_start, const int64_t *region_end,
                      const int32_t *batch_row, int64_t nbatches,
                      kr_record_columns *cols, int64_t first_row, int64_t cap,
                      int64_t *n_out, kr_error *err);

/* Encode the record bodies of records [lo, hi) of one batch into out[0,cap).
 * Keys/values are given Arrow-style: data + offsets (n+1) + optional null
 * masks (NULL = none null; keys == NULL means every key is null).  The
 * offset delta of record i is (i - lo); its timestamp delta is
 * ts[i] - base_ts (ts == NULL means all timestamps equal base_ts).
 * Returns the bytes written, or -1 if cap is too small. */
int64_t kr_encode_records(uint8_t *out, int64_t cap, int64_t lo, int64_t hi,
                          const uint8_t *keys, const int64_t *key_off, const uint8_t *key_null,
                          const uint8_t *vals, const int64_t *val_off, const uint8_t *val_null,
                          const int64_t *ts, int64_t base_ts);

/* Write the 61-byte header at out[0] for a batch whose records section
 * (records_len bytes, possibly compressed) already sits at out[61], and fill
 * in the CRC.  Returns the whole batch size. */
int64_t kr_write_batch_header(uint8_t *out, int64_t base_offset, int64_t records_len,
                              int32_t partition_leader_epoch, int16_t attributes,
                              int32_t last_offset_delta, int64_t base_ts, int64_t max_ts,
                              int64_t producer_id, int16_t producer_epoch,
                              int32_t base_sequence, int32_t records_count);

/* Encode records [0, n) into uncompressed batches of at most per_batch
 * records each, in one call.  Batch k gets base offset base_offset + k *
 * per_batch.  out must have room for kr_encode_bound(...) bytes.  Returns bytes
 * written or -1 when cap is too small. */
int64_t kr_encode_batches(uint8_t *out, int64_t cap, int64_t n, int64_t per_batch,
                          const uint8_t *keys, const int64_t *key_off, const uint8_t *key_null,
                          const uint8_t *vals, const int64_t *val_off, const uint8_t *val_null,
                          const int64_t *ts, int64_t default_ts, int64_t base_offset,
                          int32_t partition_leader_epoch, int16_t attributes,
                          int64_t producer_id, int16_t producer_epoch, int32_t base_sequence,
                          int64_t *batch_positions);

/* Exact bytes kr_encode_batches will write for the same arguments (one
 * cheap pass over lengths and timestamps), so callers allocate once and never
 * copy or shrink the output. */
int64_t kr_encode_batches_size(int64_t n, int64_t per_batch,
                               const uint8_t *keys, const int64_t *key_off, const uint8_t *key_null,
                               const uint8_t *vals, const int64_t *val_off, const uint8_t *val_null,
                               const int64_t *ts);

/* Worst-case bytes for encoding n records with total key+value payload
 * bytes in nb batches. */
static inline int64_t kr_encode_bound(int64_t n, int64_t payload, int64_t nb) {
    /* per record: 5 (length) + 1 (attributes) + 10 (ts delta) + 5 (offset delta)
     * + 5 (key length) + 5 (value length) + 1 (headers count) = 32 */
    return payload + 32 * n + (int64_t)KR_HEADER_SIZE * nb;
}

#endif
