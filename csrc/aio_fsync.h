/* Asynchronous fdatasync through Linux native AIO (IOCB_CMD_FDSYNC).
 *
 * Why: the Raft leader fsyncs its log while its single-threaded event loop
 * should keep answering Fetches.  A Python flush thread needs a futex wake-up
 * and the GIL twice per flush; here io_submit queues the fdatasync to a kernel
 * worker (~1 us) and the completion is signalled on an eventfd the event loop
 * already watches, with no user thread and no GIL involved.
 *
 * Requires Linux >= 4.18 (IOCB_CMD_FDSYNC in the native AIO interface).  Every
 * function returns 0 / a count on success and -errno on failure; nothing here
 * allocates or keeps pointers to caller memory after it returns (the kernel
 * copies each iocb during io_submit).
 */
#ifndef KRAFT_AIO_FSYNC_H
#define KRAFT_AIO_FSYNC_H

#include <stdint.h>

/* One completion: the 64-bit tag given at submission and the fdatasync result
 * (0 or -errno). */
typedef struct {
    uint64_t tag;
    int64_t res;
} kraft_aio_completion;

/* Create an AIO context of `depth` slots; *ctx receives its handle. */
int kraft_aio_setup(unsigned depth, uint64_t *ctx);

/* Queue fdatasync(fd); completion is reported with `tag` and counted on the
 * eventfd `efd`.  Returns 0, or -errno (-EINVAL when the file system cannot do
 * it asynchronously, -EAGAIN when the context is full). */
int kraft_aio_submit_fdsync(uint64_t ctx, int fd, int efd, uint64_t tag);

/* Collect up to `max` finished requests without waiting; returns how many. */
int kraft_aio_reap(uint64_t ctx, kraft_aio_completion *out, int max);

/* Destroy the context (the kernel waits for requests still in flight). */
int kraft_aio_destroy(uint64_t ctx);

#endif
