/*
 * CRC-32C (Castagnoli) for Kafka record batches.
 *
 * Kafka's v2 record batch stores, at byte 17 of the batch, the CRC-32C of
 * everything from the attributes field (byte 21) to the end of the batch.
 * Every batch read from disk or the network is checked, so this checksum is
 * on the hot path of log recovery, fetch and replication.
 *
 * Semantics (identical to the `crc32c` PyPI package's `crc32c(data, value)`):
 *   - polynomial 0x1EDC6F41, bit-reflected (0x82F63B78), init 0xFFFFFFFF,
 *     final xor 0xFFFFFFFF;
 *   - `crc` is a previous *finished* result (0 to start), so calls chain:
 *         kr_crc32c(kr_crc32c(0, a, na), b, nb) == kr_crc32c(0, a ++ b, na + nb)
 *   - kr_crc32c(0, "123456789", 9) == 0xE3069283.
 *
 * Every function is thread-safe and reads exactly `len` bytes from `buf`
 * (which need not be aligned).  `buf` may be NULL when `len` is 0.
 */
#ifndef KRAFT_CRC32C_H
#define KRAFT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CRC-32C with the fastest kernel this CPU supports (chosen once, on first call). */
uint32_t kr_crc32c(uint32_t crc, const void *buf, size_t len);

/* Name of the kernel kr_crc32c uses, e.g. "vpclmul-avx2", "sse42-3way", "slice8". */
const char *kr_crc32c_impl(void);

/* The portable slicing-by-8 table kernel, whatever the CPU (for tests and as a baseline). */
uint32_t kr_crc32c_portable(uint32_t crc, const void *buf, size_t len);

/* Kernels by number, so tests can check each one the CPU can run against the others. */
enum {
    KR_CRC32C_SLICE8 = 0,   /* portable, any CPU */
    KR_CRC32C_SSE42 = 1,    /* x86-64: SSE4.2 crc32 in 3 streams + PCLMULQDQ recombination */
    KR_CRC32C_VPCLMUL = 2,  /* x86-64: AVX2 + VPCLMULQDQ folding, SSE4.2 for the tail */
    KR_CRC32C_NKERNELS = 3
};

/* Name of kernel `which`, or NULL if `which` is out of range. */
const char *kr_crc32c_kernel_name(int which);

/* 1 if this CPU (and build) can run kernel `which`, else 0. */
int kr_crc32c_kernel_available(int which);

/* Run kernel `which`.  The caller must have checked kr_crc32c_kernel_available;
 * an unavailable or unknown kernel falls back to the portable one (never a
 * SIGILL). */
uint32_t kr_crc32c_kernel(int which, uint32_t crc, const void *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* KRAFT_CRC32C_H */
