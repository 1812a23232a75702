#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

static _Thread_local char last_error[512];
static _Thread_local dtx_status last_status;

const char *dtx_last_error(void) { return last_error; }

dtx_status dtx_last_status(void) { return last_status; }

void dtx_clear_error(void) {
    last_error[0] = '\0';
    last_status = DTX_OK;
}

const char *dtx_version(void) {
#define DTX_STR2(x) #x
#define DTX_STR(x) DTX_STR2(x)
    return DTX_STR(DTX_VERSION_MAJOR) "." DTX_STR(DTX_VERSION_MINOR);
}

dtx_shown dtx_show_n(const char *s, size_t n) {
    dtx_shown o;
    size_t k = 0;
    for (size_t i = 0; i < n && k < 64; i++) {
        unsigned char c = (unsigned char)s[i];
        o.s[k++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (n > 64) {
        memcpy(o.s + k, "...", 3);
        k += 3;
    }
    o.s[k] = '\0';
    return o;
}

dtx_shown dtx_show(const char *s) { return dtx_show_n(s, strlen(s)); }

dtx_status dtx_fail(dtx_status st, const char *fmt, ...) {
    last_status = st;
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
    case DTX_ERR_NUMERIC: return "numeric error";
    case DTX_ERR_USAGE: return "usage error";
    case DTX_ERR_STOPPED: return "stopped";
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

void *dtx_alloc_lazy_zero(size_t count, size_t elem_size) {
    if (elem_size && count > SIZE_MAX / elem_size) {
        dtx_fail(DTX_ERR_NOMEM, "out of memory: %zu elements of %zu bytes", count, elem_size);
        return NULL;
    }
    size_t bytes = count * elem_size != 0 ? count * elem_size : 1;
    /* NORESERVE: most of it may never be written (weights in place), so the
     * kernel's overcommit heuristic must not refuse it for its size alone */
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        dtx_fail(DTX_ERR_NOMEM, "out of memory allocating %zu bytes", bytes);
        return NULL;
    }
    return p;
}

void *dtx_alloc_huge(size_t bytes, size_t *size) {
    const size_t huge = (size_t)2 << 20;
    if (bytes > SIZE_MAX - 2 * huge) {
        dtx_fail(DTX_ERR_NOMEM, "out of memory: %zu bytes", bytes);
        return NULL;
    }
    size_t n = (bytes + huge - 1) / huge * huge;
    if (n == 0) n = huge;
    /* one huge page more, then the ends trimmed: the start on a 2 MiB boundary */
    unsigned char *p = mmap(NULL, n + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        dtx_fail(DTX_ERR_NOMEM, "out of memory allocating %zu bytes", n);
        return NULL;
    }
    size_t head = (huge - (uintptr_t)p % huge) % huge;
    if (head) munmap(p, head);
    if (huge - head) munmap(p + head + n, huge - head);
    p += head;
    (void)madvise(p, n, MADV_HUGEPAGE); /* EINVAL where the kernel lacks THP: 4 KiB pages as before */
    *size = n;
    return p;
}

void *dtx_alloc_work(size_t bytes, size_t *size) {
#if defined(__SANITIZE_ADDRESS__)
    *size = 0;
    return dtx_calloc(bytes ? bytes : 1, 1);
#else
    return dtx_alloc_huge(bytes, size);
#endif
}

void dtx_free_work(void *p, size_t size) {
    if (size) dtx_free_lazy_zero(p, size, 1);
    else free(p);
}

void dtx_advise_huge(void *p, size_t bytes) {
    if (p && bytes) (void)madvise(p, bytes, MADV_HUGEPAGE); /* EINVAL without THP: 4 KiB pages as before */
}

void dtx_free_lazy_zero(void *p, size_t count, size_t elem_size) {
    if (p) munmap(p, count * elem_size != 0 ? count * elem_size : 1);
}

void dtx_drop_pages(const void *p, size_t bytes) {
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return;
    uintptr_t a = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1), e = ((uintptr_t)p + bytes) & ~((uintptr_t)pg - 1);
    if (e > a) madvise((void *)a, e - a, MADV_DONTNEED);
}

#ifndef MADV_POPULATE_READ /* Linux 5.14; glibc's headers may predate them */
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif
void dtx_prefault(const void *p, size_t bytes, int write) {
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0 || !p || !bytes) return;
    uintptr_t a = (uintptr_t)p & ~((uintptr_t)pg - 1), e = (uintptr_t)p + bytes;
    if (write) { /* only pages wholly inside: a neighbour's page is not ours to touch */
        a = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1), e &= ~((uintptr_t)pg - 1);
        if (e <= a) return;
    }
    (void)madvise((void *)a, e - a, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ); /* EINVAL: faults as before */
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

FILE *dtx_fopen_read(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        dtx_fail(DTX_ERR_IO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        dtx_fail(DTX_ERR_IO, "%s: a folder, not a file", path);
        return NULL;
    }
    return f;
}

dtx_status dtx_read_file(const char *path, char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    FILE *f = dtx_fopen_read(path);
    if (!f) return DTX_ERR_IO;
    dtx_status st = dtx_read_stream(f, path, buf, len);
    fclose(f);
    return st;
}

void dtx_sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

static void atomic_free(dtx_atomic_file *w) {
    free(w->path);
    free(w->tmp);
    w->path = w->tmp = NULL;
    w->fp = NULL;
}

dtx_status dtx_atomic_open(dtx_atomic_file *w, const char *path) {
    memset(w, 0, sizeof *w);
    struct stat sb;
    int in_place = stat(path, &sb) == 0 && !S_ISREG(sb.st_mode);
    size_t tl = strlen(path) + 32;
    w->path = strdup(path);
    w->tmp = in_place ? NULL : malloc(tl);
    if (!w->path || (!in_place && !w->tmp)) {
        atomic_free(w);
        return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", path);
    }
    if (w->tmp) snprintf(w->tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    w->fp = fopen(in_place ? path : w->tmp, "wb");
    if (!w->fp) {
        int e = errno ? errno : EIO;
        atomic_free(w);
        return dtx_fail(DTX_ERR_IO, "%s: cannot write%s: %s", path, in_place ? "" : " the temporary file", strerror(e));
    }
    return DTX_OK;
}

/* The test hook of dtx_atomic_open's comment: milliseconds, 0 when unset. */
static long commit_delay_ms(void) {
    const char *s = getenv("DTX_TEST_COMMIT_DELAY_MS");
    long ms = s ? strtol(s, NULL, 10) : 0;
    return ms > 0 && ms <= 10000 ? ms : 0;
}

dtx_status dtx_atomic_commit(dtx_atomic_file *w, int err) {
    const char *what = "cannot write";
    int e = err;
    if (!e && ferror(w->fp)) e = EIO;
    if (!e && fflush(w->fp) != 0) e = errno ? errno : EIO;
    if (!e && w->tmp && fsync(fileno(w->fp)) != 0) e = errno ? errno : EIO;
    if (fclose(w->fp) != 0 && !e) e = errno ? errno : EIO;
    w->fp = NULL;
    if (!e && w->tmp) {
        long ms = commit_delay_ms();
        if (ms) nanosleep(&(struct timespec){ms / 1000, ms % 1000 * 1000000L}, NULL);
        if (rename(w->tmp, w->path) != 0) {
            what = "cannot rename the temporary file over it";
            e = errno ? errno : EIO;
        } else {
            dtx_sync_dir(w->path);
        }
    }
    if (e && w->tmp) unlink(w->tmp);
    dtx_status st = e ? dtx_fail(DTX_ERR_IO, "%s: %s: %s", w->path, what, strerror(e)) : DTX_OK;
    atomic_free(w);
    return st;
}

void dtx_atomic_abort(dtx_atomic_file *w) {
    if (w->fp) fclose(w->fp);
    if (w->fp && w->tmp) unlink(w->tmp);
    atomic_free(w);
}

dtx_status dtx_lock_acquire(const char *lock_path, int *fd, long *holder) {
    *fd = -1;
    *holder = 0;
    for (int tries = 0; tries < 100; tries++) {
        int f = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (f < 0) return dtx_fail(DTX_ERR_IO, "%s: cannot lock: %s", lock_path, strerror(errno));
        if (flock(f, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            char pid[32] = "";
            ssize_t n = e == EWOULDBLOCK ? pread(f, pid, sizeof pid - 1, 0) : -1;
            close(f);
            if (e != EWOULDBLOCK) return dtx_fail(DTX_ERR_IO, "%s: cannot lock: %s", lock_path, strerror(e));
            pid[n > 0 ? n : 0] = '\0';
            char *end;
            long p = strtol(pid, &end, 10);
            *holder = end != pid && p > 0 ? p : -1;
            if (*holder > 0) return dtx_fail(DTX_ERR_IO, "%s: held by process %ld", lock_path, *holder);
            return dtx_fail(DTX_ERR_IO, "%s: held by another process", lock_path);
        }
        /* the holder before us may have removed the file between our open and
         * our lock: then we hold a lock on a file nobody else can see; again */
        struct stat a, b;
        if (fstat(f, &a) == 0 && stat(lock_path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
            char pid[32];
            int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
            if (ftruncate(f, 0) != 0 || pwrite(f, pid, (size_t)n, 0) != n) { /* the pid is a courtesy */ }
            *fd = f;
            return DTX_OK;
        }
        close(f);
    }
    return dtx_fail(DTX_ERR_IO, "%s: cannot lock: the file keeps changing", lock_path);
}

void dtx_lock_release(const char *lock_path, int fd) {
    if (fd < 0) return;
    unlink(lock_path); /* while still held: a process that opens it next creates a new one */
    close(fd);
}

dtx_status dtx_write_file_atomic(const char *path, const void *data, size_t len) {
    dtx_atomic_file w;
    dtx_status st = dtx_atomic_open(&w, path);
    if (st) return st;
    int e = len && fwrite(data, 1, len, w.fp) != len ? (errno ? errno : EIO) : 0;
    return dtx_atomic_commit(&w, e);
}

dtx_status dtx_map_file(const char *path, const char *what, dtx_mapped *out) {
    out->data = NULL;
    out->size = 0;
    out->heap = 0;
    /* O_NONBLOCK: opening a FIFO must not hang; fstat then refuses it */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return dtx_fail(DTX_ERR_IO, "%s: %s%s%s", path, what ? what : "", what ? ": " : "", strerror(errno));
    struct stat sb;
    dtx_status st = DTX_OK;
    if (fstat(fd, &sb) != 0) st = dtx_fail(DTX_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode)) st = dtx_fail(DTX_ERR_IO, "%s: not a regular file", path);
    else if ((uint64_t)sb.st_size > SIZE_MAX) st = dtx_fail(DTX_ERR_IO, "%s: too large to map", path);
    else if (sb.st_size > 0 && (size_t)sb.st_size < DTX_MAP_READ_BELOW) {
        size_t n = (size_t)sb.st_size, got = 0;
        char *b = malloc(n);
        if (!b) st = dtx_fail(DTX_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, n);
        while (b && got < n) {
            ssize_t k = pread(fd, b + got, n - got, (off_t)got);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) { /* the file shrank, or a read error */
                st = dtx_fail(DTX_ERR_IO, "%s: read error: %s", path, k < 0 ? strerror(errno) : "the file shrank");
                break;
            }
            got += (size_t)k;
        }
        if (st) free(b);
        else out->data = b, out->size = n, out->heap = 1;
    } else if (sb.st_size > 0) { /* mmap refuses a zero length */
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) st = dtx_fail(DTX_ERR_IO, "%s: cannot mmap: %s", path, strerror(errno));
        else out->data = m, out->size = (size_t)sb.st_size;
    }
    close(fd); /* the mapping keeps the file open */
    return st;
}

void dtx_unmap_file(dtx_mapped *m) {
    if (m->data && m->heap) free(m->data);
    else if (m->data) munmap(m->data, m->size);
    m->data = NULL;
    m->size = 0;
    m->heap = 0;
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

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
double dtx_now_s(void) { return clock_s(CLOCK_MONOTONIC); }
double dtx_cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

size_t dtx_first_bad_block(const void *v, size_t n, size_t block, int (*bad)(const void *v, size_t lo, size_t hi)) {
    const size_t nb = block ? (n + block - 1) / block : 0;
    size_t first = SIZE_MAX;
    if (nb <= 1) return nb == 1 && bad(v, 0, n) ? 0 : SIZE_MAX;
#pragma omp parallel for schedule(static) reduction(min : first)
    for (size_t b = 0; b < nb; b++) {
        const size_t e = n - b * block < block ? n : (b + 1) * block;
        if (b < first && bad(v, b * block, e)) first = b;
    }
    return first;
}
