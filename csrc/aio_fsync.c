/* See aio_fsync.h.  Raw syscalls: glibc has no wrappers for the native AIO
 * interface and libaio would be one more system dependency for four calls. */
#define _GNU_SOURCE
#include "aio_fsync.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#if defined(__linux__)
#include <linux/aio_abi.h>
#include <sys/syscall.h>
#include <unistd.h>

int kraft_aio_setup(unsigned depth, uint64_t *ctx) {
    aio_context_t c = 0;
    if (syscall(SYS_io_setup, depth, &c) < 0) return -errno;
    *ctx = (uint64_t)c;
    return 0;
}

int kraft_aio_submit_fdsync(uint64_t ctx, int fd, int efd, uint64_t tag) {
    struct iocb cb;
    struct iocb *cbs[1] = {&cb};
    memset(&cb, 0, sizeof cb);
    cb.aio_lio_opcode = IOCB_CMD_FDSYNC;
    cb.aio_fildes = (uint32_t)fd;
    cb.aio_data = tag;
    cb.aio_flags = IOCB_FLAG_RESFD;
    cb.aio_resfd = (uint32_t)efd;
    long r;
    do {
        r = syscall(SYS_io_submit, (aio_context_t)ctx, 1L, cbs);
    } while (r < 0 && errno == EINTR);
    if (r < 0) return -errno;
    return r == 1 ? 0 : -EAGAIN;
}

int kraft_aio_reap(uint64_t ctx, kraft_aio_completion *out, int max) {
    struct io_event ev[64];
    struct timespec zero = {0, 0};
    if (max > 64) max = 64;
    long n;
    do {
        n = syscall(SYS_io_getevents, (aio_context_t)ctx, 0L, (long)max, ev, &zero);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return -errno;
    for (long i = 0; i < n; i++) {
        out[i].tag = ev[i].data;
        out[i].res = ev[i].res;
    }
    return (int)n;
}

int kraft_aio_destroy(uint64_t ctx) {
    return syscall(SYS_io_destroy, (aio_context_t)ctx) < 0 ? -errno : 0;
}

#else  /* not Linux: no native AIO; callers fall back to the thread twin */

int kraft_aio_setup(unsigned depth, uint64_t *ctx) { (void)depth; (void)ctx; return -ENOSYS; }
int kraft_aio_submit_fdsync(uint64_t ctx, int fd, int efd, uint64_t tag) {
    (void)ctx; (void)fd; (void)efd; (void)tag; return -ENOSYS;
}
int kraft_aio_reap(uint64_t ctx, kraft_aio_completion *out, int max) {
    (void)ctx; (void)out; (void)max; return -ENOSYS;
}
int kraft_aio_destroy(uint64_t ctx) { (void)ctx; return -ENOSYS; }

#endif
