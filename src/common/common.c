#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

static _Thread_local char last_error[512];

const char *dtx_last_error(void) { return last_error; }

void dtx_clear_error(void) { last_error[0] = '\0'; }

dtx_status dtx_fail(dtx_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

const char *dtx_status_name(dtx_status st) {
    switch (st) {
    case DTX_OK: return "ok";
    case DTX_ERR_IO: return "i/o error";
    case DTX_ERR_FORMAT: return "format error";
    case DTX_ERR_CONFIG: return "config error";
    case DTX_ERR_ARG: return "invalid argument";
    case DTX_ERR_NOMEM: return "out of memory";
    }
    return "unknown status";
}

void *dtx_alloc(size_t count, size_t elem_size) {
    if (elem_size && count > SIZE_MAX / elem_size) {
        dtx_fail(DTX_ERR_NOMEM, "allocation of %zu x %zu bytes overflows", count, elem_size);
        return NULL;
    }
    size_t bytes = count * elem_size;
    bytes = (bytes + 63) & ~(size_t)63;
    if (bytes == 0) bytes = 64;
    void *p = aligned_alloc(64, bytes);
    if (!p) dtx_fail(DTX_ERR_NOMEM, "out of memory allocating %zu bytes", bytes);
    return p;
}

void dtx_release_zero(void *p, size_t bytes) {
    memset(p, 0, bytes);
    /* whole pages inside the range go back to the system; they read as zero again when touched */
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return;
    uintptr_t a = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1), e = ((uintptr_t)p + bytes) & ~((uintptr_t)pg - 1);
    if (e > a) madvise((void *)a, e - a, MADV_DONTNEED);
}

void *dtx_calloc(size_t count, size_t elem_size) {
    void *p = dtx_alloc(count, elem_size);
    if (p) memset(p, 0, count * elem_size);
    return p;
}

dtx_status dtx_read_stream(FILE *f, const char *name, char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = cap > SIZE_MAX / 4 ? NULL : realloc(b, cap * 2 + 1);
        if (!nb) {
            free(b);
            b = NULL;
            break;
        }
        b = nb;
        cap *= 2;
    }
    if (!b) return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory reading it", name);
    if (ferror(f)) {
        int err = errno ? errno : EIO;
        free(b);
        return dtx_fail(DTX_ERR_IO, "%s: read error: %s", name, strerror(err));
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return DTX_OK;
}

dtx_status dtx_read_file(const char *path, char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return dtx_fail(DTX_ERR_IO, "%s: %s", path, strerror(errno));
    dtx_status st = dtx_read_stream(f, path, buf, len);
    fclose(f);
    return st;
}

/* Writes data to f, flushes it and, for a real file (sync), fsyncs it;
 * closes f either way. 0 or an errno value. */
static int put_and_close(FILE *f, const void *data, size_t len, int sync) {
    int e = 0;
    if (len && fwrite(data, 1, len, f) != len) e = errno ? errno : EIO;
    if (!e && fflush(f) != 0) e = errno ? errno : EIO;
    if (!e && sync && fsync(fileno(f)) != 0) e = errno ? errno : EIO;
    if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
    return e;
}

dtx_status dtx_write_file_atomic(const char *path, const void *data, size_t len) {
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        /* /dev/stdout, a FIFO, /dev/null: written in place, since renaming
         * over it would replace the device or the pipe itself */
        FILE *f = fopen(path, "wb");
        int e = f ? put_and_close(f, data, len, 0) : (errno ? errno : EIO);
        if (e) return dtx_fail(DTX_ERR_IO, "%s: cannot write: %s", path, strerror(e));
        return DTX_OK;
    }
    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    if (!tmp) return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", path);
    /* same folder as the target, so rename() stays on one file system */
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    const char *what = "cannot write the temporary file";
    FILE *f = fopen(tmp, "wb");
    int e = f ? 0 : (errno ? errno : EIO);
    if (!e) {
        what = "cannot write";
        e = put_and_close(f, data, len, 1);
        if (!e && rename(tmp, path) != 0) {
            what = "cannot rename the temporary file over it";
            e = errno ? errno : EIO;
        }
        if (e) unlink(tmp);
    }
    free(tmp);
    if (e) return dtx_fail(DTX_ERR_IO, "%s: %s: %s", path, what, strerror(e));
    return DTX_OK;
}

dtx_status dtx_map_file(const char *path, const char *what, dtx_mapped *out) {
    out->data = NULL;
    out->size = 0;
    /* O_NONBLOCK: opening a FIFO must not hang; fstat then refuses it */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return dtx_fail(DTX_ERR_IO, "%s: %s%s%s", path, what ? what : "", what ? ": " : "", strerror(errno));
    struct stat sb;
    dtx_status st = DTX_OK;
    if (fstat(fd, &sb) != 0) st = dtx_fail(DTX_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode)) st = dtx_fail(DTX_ERR_IO, "%s: not a regular file", path);
    else if ((uint64_t)sb.st_size > SIZE_MAX) st = dtx_fail(DTX_ERR_IO, "%s: too large to map", path);
    else if (sb.st_size > 0) { /* mmap refuses a zero length */
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) st = dtx_fail(DTX_ERR_IO, "%s: cannot mmap: %s", path, strerror(errno));
        else out->data = m, out->size = (size_t)sb.st_size;
    }
    close(fd); /* the mapping keeps the file open */
    return st;
}

void dtx_unmap_file(dtx_mapped *m) {
    if (m->data) munmap(m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

uint64_t dtx_mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void dtx_rng_seed(dtx_rng *r, uint64_t seed) {
    /* splitmix64's stream: the state advances by the constant, each output is its mix */
    for (int i = 0; i < 4; i++, seed += 0x9e3779b97f4a7c15ULL) r->s[i] = dtx_mix64(seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t dtx_rng_next(dtx_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double dtx_rng_uniform(dtx_rng *r) { return (double)(dtx_rng_next(r) >> 11) * 0x1.0p-53; }

double dtx_rng_normal(dtx_rng *r) {
    double u1 = dtx_rng_uniform(r), u2 = dtx_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

const char *dtx_format_real(double v, char *buf, size_t cap) {
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

double dtx_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
