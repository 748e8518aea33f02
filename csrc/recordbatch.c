/*
 * Record batch v2 kernels.  See recordbatch.h for the byte layouts.
 *
 * Safety rule for every reader here: a length or count read from the input
 * is never trusted before it has been checked against the bytes that remain.
 * All arithmetic on positions is done in int64_t so that hostile int32
 * lengths cannot overflow it.
 */
#include "recordbatch.h"
#include "crc32c.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- big-endian loads and stores ------------------------------------- */

static inline uint16_t ld16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline uint32_t ld32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t ld64(const uint8_t *p) { return ((uint64_t)ld32(p) << 32) | ld32(p + 4); }
static inline void st16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline void st32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline void st64(uint8_t *p, uint64_t v) { st32(p, (uint32_t)(v >> 32)); st32(p + 4, (uint32_t)v); }

static void set_err(kr_error *err, int code, int64_t pos, int64_t base_offset, const char *fmt, ...) {
    if (!err) return;
    err->code = code;
    err->position = pos;
    err->base_offset = base_offset;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
}

/* ---- zig-zag varints (Kafka's ByteUtils) ------------------------------ */

/* Read a zig-zag varint of at most 5 bytes from [*p, end).  Returns 0 on
 * success, -1 if the buffer ends first, -2 if the varint is longer than 5
 * bytes (Kafka: "Varint is too long"). */
static inline int rd_varint(const uint8_t **p, const uint8_t *end, int32_t *out) {
    const uint8_t *q = *p;
    uint32_t v = 0;
    int shift = 0;
    for (int i = 0; i < 5; i++) {
        if (q >= end) return -1;
        uint8_t b = *q++;
        v |= (uint32_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *p = q;
            *out = (int32_t)((v >> 1) ^ (~(v & 1) + 1));
            return 0;
        }
        shift += 7;
    }
    return -2;
}

static inline int rd_varlong(const uint8_t **p, const uint8_t *end, int64_t *out) {
    const uint8_t *q = *p;
    uint64_t v = 0;
    int shift = 0;
    for (int i = 0; i < 10; i++) {
        if (q >= end) return -1;
        uint8_t b = *q++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *p = q;
            *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
            return 0;
        }
        shift += 7;
    }
    return -2;
}

static inline uint8_t *wr_uvarint(uint8_t *p, uint32_t v) {
    while (v & ~0x7fu) { *p++ = (uint8_t)((v & 0x7f) | 0x80); v >>= 7; }
    *p++ = (uint8_t)v;
    return p;
}
static inline uint8_t *wr_varint(uint8_t *p, int32_t v) {
    return wr_uvarint(p, ((uint32_t)v << 1) ^ (uint32_t)(v >> 31));
}
static inline uint8_t *wr_varlong(uint8_t *p, int64_t v) {
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (u & ~(uint64_t)0x7f) { *p++ = (uint8_t)((u & 0x7f) | 0x80); u >>= 7; }
    *p++ = (uint8_t)u;
    return p;
}
static inline int varint_size(int32_t v) {
    uint32_t u = ((uint32_t)v << 1) ^ (uint32_t)(v >> 31);
    int n = 1;
    while (u >= 0x80) { u >>= 7; n++; }
    return n;
}
static inline int varlong_size(int64_t v) {
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (u >= 0x80) { u >>= 7; n++; }
    return n;
}

/* ---- scanning ------------------------------------------------------------ */

int kr_scan_batches(const uint8_t *buf, int64_t start, int64_t end, int crc_mode,
                    int64_t max_batch_size, kr_batch_header *out, int64_t cap,
                    int64_t *n_out, int64_t *next_pos, kr_error *err) {
    int64_t pos = start, n = 0;
    if (max_batch_size <= 0) max_batch_size = INT32_MAX;
    int status = KR_OK;
    while (pos < end) {
        if (n >= cap) { status = KR_E_CAPACITY; break; }
        int64_t remain = end - pos;
        const uint8_t *b = buf + pos;
        if (remain < KR_LOG_OVERHEAD) {
            set_err(err, KR_E_TRUNCATED, pos, INT64_MIN,
                    "truncated batch: %lld bytes left, fewer than the 12-byte log overhead",
                    (long long)remain);
            status = KR_E_TRUNCATED; break;
        }
        int64_t base_offset = (int64_t)ld64(b);
        int32_t batch_length = (int32_t)ld32(b + 8);
        int64_t size = (int64_t)batch_length + KR_LOG_OVERHEAD;
        if (batch_length < KR_HEADER_SIZE - KR_LOG_OVERHEAD) {
            set_err(err, KR_E_CORRUPT, pos, base_offset,
                    "batch length %d is smaller than the minimum %d", batch_length,
                    KR_HEADER_SIZE - KR_LOG_OVERHEAD);
            status = KR_E_CORRUPT; break;
        }
        if (size > max_batch_size) {
            set_err(err, KR_E_CORRUPT, pos, base_offset,
                    "batch size %lld exceeds the maximum %lld", (long long)size,
                    (long long)max_batch_size);
            status = KR_E_CORRUPT; break;
        }
        if (remain < 17) {
            set_err(err, KR_E_TRUNCATED, pos, base_offset,
                    "truncated batch: %lld of %lld bytes present", (long long)remain, (long long)size);
            status = KR_E_TRUNCATED; break;
        }
        int8_t magic = (int8_t)b[16];
        if (magic != 2) {
            set_err(err, KR_E_CORRUPT, pos, base_offset,
                    "unsupported magic %d (only record batch v2 is supported)", magic);
            status = KR_E_CORRUPT; break;
        }
        if (size > remain) {
            set_err(err, KR_E_TRUNCATED, pos, base_offset,
                    "truncated batch: %lld of %lld bytes present", (long long)remain, (long long)size);
            status = KR_E_TRUNCATED; break;
        }
        kr_batch_header *h = &out[n];
        h->position = pos;
        h->base_offset = base_offset;
        h->size = (int32_t)size;
        h->partition_leader_epoch = (int32_t)ld32(b + 12);
        h->magic = magic;
        h->crc = ld32(b + KR_CRC_OFFSET);
        h->attributes = (int16_t)ld16(b + 21);
        h->last_offset_delta = (int32_t)ld32(b + 23);
        h->base_timestamp = (int64_t)ld64(b + 27);
        h->max_timestamp = (int64_t)ld64(b + 35);
        h->producer_id = (int64_t)ld64(b + 43);
        h->producer_epoch = (int16_t)ld16(b + 51);
        h->base_sequence = (int32_t)ld32(b + 53);
        h->records_count = (int32_t)ld32(b + 57);
        h->_pad = 0;
        if (crc_mode == KR_CRC_SKIP) {
            h->crc_valid = -1;
        } else {
            uint32_t c = kr_crc32c(0, b + KR_ATTRIBUTES_OFFSET, (size_t)(size - KR_ATTRIBUTES_OFFSET));
            h->crc_valid = (c == h->crc);
            if (!h->crc_valid && crc_mode == KR_CRC_VERIFY) {
                set_err(err, KR_E_CORRUPT, pos, base_offset,
                        "CRC mismatch: stored 0x%08x, computed 0x%08x", h->crc, c);
                status = KR_E_CORRUPT; break;
            }
        }
        if (h->records_count < 0) {
            set_err(err, KR_E_CORRUPT, pos, base_offset, "negative records count %d",
                    h->records_count);
            status = KR_E_CORRUPT; break;
        }
        n++;
        pos += size;
    }
    *n_out = n;
    *next_pos = pos;
    return status;
}

/* ---- record decoding ----------------------------------------------------- */

#define TS_LOG_APPEND 0x08

int kr_decode_records(const uint8_t *buf, int64_t buflen, const kr_batch_header *hdr,
                      const int64_t *region_start, const int64_t *region_end,
                      const int32_t *batch_row, int64_t nbatches,
                      kr_record_columns *cols, int64_t first_row, int64_t cap,
                      int64_t *n_out, kr_error *err) {
    int64_t row = first_row;
    for (int64_t bi = 0; bi < nbatches; bi++) {
        const kr_batch_header *h = &hdr[bi];
        int64_t rs = region_start[bi], re = region_end[bi];
        if (rs < 0 || re < rs || re > buflen) {
            set_err(err, KR_E_CORRUPT, h->position, h->base_offset,
                    "records region [%lld, %lld) outside the buffer", (long long)rs, (long long)re);
            *n_out = row - first_row;
            return KR_E_CORRUPT;
        }
        int32_t count = h->records_count;
        if ((int64_t)count * KR_MIN_RECORD_SIZE > re - rs) {
            set_err(err, KR_E_CORRUPT, h->position, h->base_offset,
                    "records count %d cannot fit in %lld bytes of records", count,
                    (long long)(re - rs));
            *n_out = row - first_row;
            return KR_E_CORRUPT;
        }
        if (row + count > cap) {
            set_err(err, KR_E_CAPACITY, h->position, h->base_offset, "record columns full");
            *n_out = row - first_row;
            return KR_E_CAPACITY;
        }
        const int log_append = (h->attributes & TS_LOG_APPEND) != 0;
        const uint8_t *p = buf + rs, *end = buf + re;
        for (int32_t i = 0; i < count; i++) {
            const uint8_t *rec_start = p;
            int32_t length;
            int rc = rd_varint(&p, end, &length);
            if (rc) goto bad_varint;
            if (length < 0 || (int64_t)length > end - p) {
                set_err(err, KR_E_CORRUPT, (int64_t)(rec_start - buf), h->base_offset,
                        "record %d of the batch has length %d but %lld bytes remain", i, length,
                        (long long)(end - p));
                *n_out = row - first_row;
                return KR_E_CORRUPT;
            }
            const uint8_t *rend = p + length;
            if (p >= rend) goto short_record;
            int8_t attrs = (int8_t)*p++;
            int64_t ts_delta;
            int32_t off_delta, klen, vlen, hcount;
            if ((rc = rd_varlong(&p, rend, &ts_delta))) goto bad_varint;
            if ((rc = rd_varint(&p, rend, &off_delta))) goto bad_varint;
            if ((rc = rd_varint(&p, rend, &klen))) goto bad_varint;
            int64_t kpos = p - buf;
            if (klen < -1 || (klen > 0 && (int64_t)klen > rend - p)) {
                set_err(err, KR_E_CORRUPT, (int64_t)(rec_start - buf), h->base_offset,
                        "record %d: invalid key length %d", i, klen);
                *n_out = row - first_row;
                return KR_E_CORRUPT;
            }
            if (klen > 0) p += klen;
            if ((rc = rd_varint(&p, rend, &vlen))) goto bad_varint;
            int64_t vpos = p - buf;
            if (vlen < -1 || (vlen > 0 && (int64_t)vlen > rend - p)) {
                set_err(err, KR_E_CORRUPT, (int64_t)(rec_start - buf), h->base_offset,
                        "record %d: invalid value length %d", i, vlen);
                *n_out = row - first_row;
                return KR_E_CORRUPT;
            }
            if (vlen > 0) p += vlen;
            if ((rc = rd_varint(&p, rend, &hcount))) goto bad_varint;
            if (hcount < 0) {
                set_err(err, KR_E_CORRUPT, (int64_t)(rec_start - buf), h->base_offset,
                        "record %d: negative headers count %d", i, hcount);
                *n_out = row - first_row;
                return KR_E_CORRUPT;
            }
            int64_t hpos = p - buf;
            for (int32_t j = 0; j < hcount; j++) {
                int32_t hk, hv;
                if ((rc = rd_varint(&p, rend, &hk))) goto bad_varint;
                if (hk < 0 || (int64_t)hk > rend - p) {
                    set_err(err, KR_E_CORRUPT, (int64_t)(rec_start - buf), h->base_offset,
                            "record %d: invalid header key length %d", i, hk);
                    *n_out = row - first_row;
                    return KR_E_CORRUPT;
                }
                p += hk;
                if ((rc = rd_varint(&p, rend, &hv))) goto bad_varint;
                if (hv < -1 || (hv > 0 && (int64_t)hv > rend - p)) {
                    set_err(err, KR_E_CORRUPT, (int64_t)(rec_start - buf), h->base_offset,
                            "record %d: invalid header value length %d", i, hv);
                    *n_out = row - first_row;
                    return KR_E_CORRUPT;
                }
                if (hv > 0) p += hv;
            }
            if (p != rend) {
                set_err(err, KR_E_CORRUPT, (int64_t)(rec_start - buf), h->base_offset,
                        "record %d: declared length %d but its fields take %lld bytes", i, length,
                        (long long)(p - (rend - length)));
                *n_out = row - first_row;
                return KR_E_CORRUPT;
            }
            cols->offset[row] = (int64_t)((uint64_t)h->base_offset + (uint64_t)(int64_t)off_delta);
            cols->timestamp[row] = log_append ? h->max_timestamp
                                            : (int64_t)((uint64_t)h->base_timestamp + (uint64_t)ts_delta);
            cols->key_pos[row] = kpos;
            cols->key_len[row] = klen;
            cols->value_pos[row] = vpos;
            cols->value_len[row] = vlen;
            cols->headers_pos[row] = hpos;
            cols->headers_count[row] = hcount;
            cols->batch[row] = batch_row ? batch_row[bi] : (int32_t)bi;
            cols->attributes[row] = attrs;
            row++;
            continue;
        bad_varint:
            set_err(err, KR_E_CORRUPT, (int64_t)(p - buf), h->base_offset,
                    rc == -2 ? "record %d: varint is too long" : "record %d: truncated varint", i);
            *n_out = row - first_row;
            return KR_E_CORRUPT;
        short_record:
            set_err(err, KR_E_CORRUPT, (int64_t)(rec_start - buf), h->base_offset,
                    "record %d: empty record", i);
            *n_out = row - first_row;
            return KR_E_CORRUPT;
        }
        if (p != end) {
            set_err(err, KR_E_CORRUPT, (int64_t)(p - buf), h->base_offset,
                    "%lld bytes left over after the %d records the batch declares",
                    (long long)(end - p), count);
            *n_out = row - first_row;
            return KR_E_CORRUPT;
        }
    }
    *n_out = row - first_row;
    return KR_OK;
}

/* ---- encoding ----------------------------------------------------------- */

int64_t kr_encode_records(uint8_t *out, int64_t cap, int64_t lo, int64_t hi,
                          const uint8_t *keys, const int64_t *key_off, const uint8_t *key_null,
                          const uint8_t *vals, const int64_t *val_off, const uint8_t *val_null,
                          const int64_t *ts, int64_t base_ts) {
    uint8_t *p = out, *end = out + cap;
    for (int64_t i = lo; i < hi; i++) {
        int32_t klen = -1, vlen = -1;
        const uint8_t *k = NULL, *v = NULL;
        if (keys && !(key_null && key_null[i])) {
            klen = (int32_t)(key_off[i + 1] - key_off[i]);
            k = keys + key_off[i];
        }
        if (vals && !(val_null && val_null[i])) {
            vlen = (int32_t)(val_off[i + 1] - val_off[i]);
            v = vals + val_off[i];
        }
        int64_t tsd = ts ? (int64_t)((uint64_t)ts[i] - (uint64_t)base_ts) : 0;
        int32_t od = (int32_t)(i - lo);
        /* body: attributes(1) ts delta, offset delta, key, value, headers count(1) */
        uint8_t tmp[32];
        uint8_t *t = tmp;
        *t++ = 0;
        t = wr_varlong(t, tsd);
        t = wr_varint(t, od);
        t = wr_varint(t, klen);
        int64_t head = t - tmp;
        int64_t body = head + (klen > 0 ? klen : 0) + varint_size(vlen) + (vlen > 0 ? vlen : 0) + 1;
        if (body > INT32_MAX) return -1;
        if ((end - p) < body + varint_size((int32_t)body)) return -1;
        p = wr_varint(p, (int32_t)body);
        memcpy(p, tmp, (size_t)head); p += head;
        if (klen > 0) { memcpy(p, k, (size_t)klen); p += klen; }
        p = wr_varint(p, vlen);
        if (vlen > 0) { memcpy(p, v, (size_t)vlen); p += vlen; }
        *p++ = 0; /* no headers */
    }
    return p - out;
}

int64_t kr_write_batch_header(uint8_t *out, int64_t base_offset, int64_t records_len,
                              int32_t partition_leader_epoch, int16_t attributes,
                              int32_t last_offset_delta, int64_t base_ts, int64_t max_ts,
                              int64_t producer_id, int16_t producer_epoch,
                              int32_t base_sequence, int32_t records_count) {
    int64_t size = KR_HEADER_SIZE + records_len;
    st64(out, (uint64_t)base_offset);
    st32(out + 8, (uint32_t)(size - KR_LOG_OVERHEAD));
    st32(out + 12, (uint32_t)partition_leader_epoch);
    out[16] = 2;
    st16(out + 21, (uint16_t)attributes);
    st32(out + 23, (uint32_t)last_offset_delta);
    st64(out + 27, (uint64_t)base_ts);
    st64(out + 35, (uint64_t)max_ts);
    st64(out + 43, (uint64_t)producer_id);
    st16(out + 51, (uint16_t)producer_epoch);
    st32(out + 53, (uint32_t)base_sequence);
    st32(out + 57, (uint32_t)records_count);
    st32(out + KR_CRC_OFFSET, kr_crc32c(0, out + KR_ATTRIBUTES_OFFSET, (size_t)(size - KR_ATTRIBUTES_OFFSET)));
    return size;
}

int64_t kr_encode_batches(uint8_t *out, int64_t cap, int64_t n, int64_t per_batch,
                          const uint8_t *keys, const int64_t *key_off, const uint8_t *key_null,
                          const uint8_t *vals, const int64_t *val_off, const uint8_t *val_null,
                          const int64_t *ts, int64_t default_ts, int64_t base_offset,
                          int32_t partition_leader_epoch, int16_t attributes,
                          int64_t producer_id, int16_t producer_epoch, int32_t base_sequence,
                          int64_t *batch_positions) {
    int64_t pos = 0, k = 0;
    if (per_batch <= 0) return -1;
    for (int64_t lo = 0; lo < n; lo += per_batch, k++) {
        int64_t hi = lo + per_batch < n ? lo + per_batch : n;
        int64_t base_ts = ts ? ts[lo] : default_ts, max_ts = base_ts;
        if (ts) for (int64_t i = lo + 1; i < hi; i++) if (ts[i] > max_ts) max_ts = ts[i];
        if (cap - pos < KR_HEADER_SIZE) return -1;
        int64_t rl = kr_encode_records(out + pos + KR_HEADER_SIZE, cap - pos - KR_HEADER_SIZE, lo, hi,
                                       keys, key_off, key_null, vals, val_off, val_null, ts, base_ts);
        if (rl < 0) return -1;
        if (batch_positions) batch_positions[k] = pos;
        int32_t seq = base_sequence < 0 ? -1 : (int32_t)(((int64_t)base_sequence + lo) & 0x7fffffff);
        pos += kr_write_batch_header(out + pos, base_offset + lo, rl, partition_leader_epoch,
                                     attributes, (int32_t)(hi - lo - 1), base_ts, max_ts,
                                     producer_id, producer_epoch, seq, (int32_t)(hi - lo));
    }
    return pos;
}

int64_t kr_encode_batches_size(int64_t n, int64_t per_batch,
                               const uint8_t *keys, const int64_t *key_off, const uint8_t *key_null,
                               const uint8_t *vals, const int64_t *val_off, const uint8_t *val_null,
                               const int64_t *ts) {
    int64_t total = 0;
    if (per_batch <= 0) return -1;
    for (int64_t lo = 0; lo < n; lo += per_batch) {
        int64_t hi = lo + per_batch < n ? lo + per_batch : n;
        int64_t base_ts = ts ? ts[lo] : 0;
        total += KR_HEADER_SIZE;
        for (int64_t i = lo; i < hi; i++) {
            int32_t klen = -1, vlen = -1;
            if (keys && !(key_null && key_null[i])) klen = (int32_t)(key_off[i + 1] - key_off[i]);
            if (vals && !(val_null && val_null[i])) vlen = (int32_t)(val_off[i + 1] - val_off[i]);
            int64_t tsd = ts ? (int64_t)((uint64_t)ts[i] - (uint64_t)base_ts) : 0;
            int64_t body = 1 + varlong_size(tsd) + varint_size((int32_t)(i - lo)) + varint_size(klen)
                           + (klen > 0 ? klen : 0) + varint_size(vlen) + (vlen > 0 ? vlen : 0) + 1;
            if (body > INT32_MAX) return -1;
            total += varint_size((int32_t)body) + body;
        }
    }
    return total;
}
