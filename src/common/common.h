/* Internal helpers shared by every module: failure messages, checked
 * allocation, whole-file reads, atomic writes and read-only maps, a seeded
 * RNG. Not part of the public API. */
#ifndef DTX_COMMON_H
#define DTX_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "difftx.h"

typedef dtx_real real;

/* CPU seconds this process has used (all threads). */
double dtx_cpu_s(void);

/* Record a one-line message for dtx_last_error() and return st. */
dtx_status dtx_fail(dtx_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A name or value from a file, made safe for a one-line message: control
 * bytes become '?', and more than 64 bytes are cut ("..."). Use .s. */
typedef struct { char s[80]; } dtx_shown;
dtx_shown dtx_show_n(const char *s, size_t n);
dtx_shown dtx_show(const char *s);
void dtx_clear_error(void);
/* The status of the most recent dtx_fail in this thread (DTX_OK after dtx_clear_error). */
dtx_status dtx_last_status(void);

/* Checked, 64-byte aligned allocation; NULL (and a message) on failure or
 * on an element count whose byte size overflows. Free with free(). */
void *dtx_alloc(size_t count, size_t elem_size);
void *dtx_calloc(size_t count, size_t elem_size);
/* count zeroed elements that cost no memory until written: an anonymous
 * mapping (page-aligned), so a model's parameters that are never filled
 * (weights used in place from a mapped file) are never resident. NULL (and
 * a message) on failure. Free with dtx_free_lazy_zero and the same sizes. */
void *dtx_alloc_lazy_zero(size_t count, size_t elem_size);
void dtx_free_lazy_zero(void *p, size_t count, size_t elem_size);
/* bytes rounded up to 2 MiB (into *size) of zeroed anonymous memory that
 * starts on a 2 MiB boundary and asks for 2 MiB pages (MADV_HUGEPAGE:
 * where transparent huge pages are "madvise" or "always"); nothing is
 * resident until written. For data streamed whole and often (a decode
 * step's weights): one TLB entry per 2 MiB. NULL (and a message) on
 * failure. Free with dtx_free_lazy_zero(p, *size, 1). */
void *dtx_alloc_huge(size_t bytes, size_t *size);
/* Zeroed working memory that a step walks whole (a training step's
 * activations, gradients, optimizer moments): dtx_alloc_huge's 2 MiB pages
 * (*size its mapping), except under AddressSanitizer, where it is heap
 * memory (*size 0) so that every read and write past its end is caught.
 * Free with dtx_free_work(p, *size). */
void *dtx_alloc_work(size_t bytes, size_t *size);
void dtx_free_work(void *p, size_t size);
/* Asks for 2 MiB pages in p[0, bytes) before it is first written (memory
 * from dtx_alloc_lazy_zero that will be written whole: an fp32 model's
 * parameters); nothing where the kernel lacks it. */
void dtx_advise_huge(void *p, size_t bytes);
/* The whole pages inside p[0, bytes) given back to the system, their
 * content no longer needed: a file mapping's are read from the file again if
 * touched, anonymous memory's read as zero. A reader that has copied or
 * coded a tensor does not hold its source pages too. */
void dtx_drop_pages(const void *p, size_t bytes);
/* The pages of p[0, bytes) mapped in one call: with write 0 a file
 * mapping's (MADV_POPULATE_READ, read from the file where the page cache
 * lacks them), with write 1 anonymous memory about to be written whole
 * (MADV_POPULATE_WRITE). A reader about to read or fill a whole model does
 * not take a page fault per 4 KiB page (on this project's VMs 2–7 µs each:
 * seconds for a few GB); the kernel maps them in one pass. Nothing where the
 * kernel lacks it (before Linux 5.14): the faults happen as before. */
void dtx_prefault(const void *p, size_t bytes, int write);
/* The first of the blocks [b·block, min((b + 1)·block, n)) of n elements for
 * which bad(v, lo, hi) is nonzero, or SIZE_MAX when none is: the blocks
 * checked over the OpenMP threads, each whole (a check without an early
 * exit vectorises), so a reader validates a big model's codes or values at
 * memory speed (a byte-by-byte check with an early exit read a 2.7B 4-bit
 * file's 1.4 GB of codes in 1.5 s). The caller then finds the element. */
size_t dtx_first_bad_block(const void *v, size_t n, size_t block, int (*bad)(const void *v, size_t lo, size_t hi));
/* Zero p[0, bytes) and hand the whole pages inside it back to the system
 * (they read as zero when touched again): memory a model no longer reads. */
void dtx_release_zero(void *p, size_t bytes);


/* The one way the library writes a file: atomically. Bytes go to
 * PATH.tmp.PID in the same folder (so rename stays on one file system);
 * commit flushes, fsyncs, closes, renames it over PATH and fsyncs the folder,
 * so a reader (or a run resumed after a crash at any moment) sees the old
 * file or the whole new one, never a part. Any failure removes the temporary
 * and leaves the old file in place. A PATH that exists and is not a regular
 * file (/dev/stdout, a FIFO, /dev/null) is written in place instead:
 * renaming over it would replace the device or the pipe itself.
 * Messages: "PATH: cannot write the temporary file: ERR" (open),
 * "PATH: cannot write: ERR" (write, flush, fsync, close),
 * "PATH: cannot rename the temporary file over it: ERR".
 * For tests of crash consistency, the environment variable
 * DTX_TEST_COMMIT_DELAY_MS (0 to 10000) makes commit sleep that long after
 * the data is written and before the rename: a wide window to kill in. */
typedef struct {
    FILE *fp;   /* write here (fwrite, fprintf, fseek); NULL once committed or aborted */
    char *path; /* the target                                                        */
    char *tmp;  /* the temporary; NULL when written in place                          */
} dtx_atomic_file;
dtx_status dtx_atomic_open(dtx_atomic_file *w, const char *path);
/* err: an errno value the caller's own writes met (0: none; ferror(fp) is
 * checked too). Publishes the file, or removes the temporary and fails. */
dtx_status dtx_atomic_commit(dtx_atomic_file *w, int err);
/* Closes and removes the temporary (nothing is published); safe after commit. */
void dtx_atomic_abort(dtx_atomic_file *w);
/* Makes a rename in path's folder durable (fsync of the folder). Best
 * effort: some file systems refuse to fsync a folder, and the data itself
 * is already safe then. */
void dtx_sync_dir(const char *path);
/* An exclusive lock on the file lock_path (created if missing; it holds the
 * owner's pid as text), so that two processes never write the same outputs:
 * flock, released by the kernel when the process ends however it ends, so a
 * killed run leaves no stale lock. Never waits. DTX_OK and *fd (>= 0) when
 * taken. When another process holds it: DTX_ERR_IO, *holder its pid (-1:
 * not known) and the message "LOCK_PATH: held by process PID"; any other
 * failure: *holder 0 and "LOCK_PATH: cannot lock: ERR". dtx_lock_release
 * removes the file and lets go. */
dtx_status dtx_lock_acquire(const char *lock_path, int *fd, long *holder);
void dtx_lock_release(const char *lock_path, int fd);


/* A whole file, read-only: mapped (MAP_PRIVATE), or for a file under
 * DTX_MAP_READ_BELOW bytes read into memory, since there a mapping and its
 * unmapping (a TLB shootdown on every core, costly in a VM) cost more than
 * the copy. An empty file has data NULL and size 0. */
#define DTX_MAP_READ_BELOW ((size_t)1 << 20)
typedef struct {
    void *data;
    size_t size;
    int heap; /* data is malloc'd, not mapped */
} dtx_mapped;
/* Maps the regular file at path whole. Refuses anything else without
 * blocking (a FIFO is opened O_NONBLOCK, then refused). On failure
 * DTX_ERR_IO, out left empty, and one of the messages "PATH: WHAT: ERR"
 * (what: the words for a failed open, e.g. "cannot open"; NULL gives
 * "PATH: ERR"), "PATH: cannot stat: ERR", "PATH: not a regular file",
 * "PATH: too large to map", "PATH: cannot mmap: ERR". */
dtx_status dtx_map_file(const char *path, const char *what, dtx_mapped *out);
/* Unmaps m (if mapped) and empties it; safe to call twice. */
void dtx_unmap_file(dtx_mapped *m);

/* The RNG (dtx_rng) is public: difftx.h. */
/* splitmix64's mixing of x + 0x9e3779b97f4a7c15: a 64-bit hash, for seeds
 * made from (seed, place) tuples. */
uint64_t dtx_mix64(uint64_t x);

/* Whether [a, a + bytes) and [b, b + bytes) share a byte (for asserts on
 * arguments that must not alias). */
static inline int dtx_overlaps(const void *a, const void *b, size_t bytes) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return bytes && x < y + bytes && y < x + bytes;
}

/* The bits of a float, and back. */
static inline uint32_t dtx_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float dtx_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bf16 bits: the top half of a float. Rounding is to nearest, ties to even;
 * a NaN stays a quiet NaN (its payload cut, never rounded into inf). Shared
 * by the safetensors reader/writer and the bf16 kernels; inline so that
 * loops over them vectorise. */
static inline float dtx_bf16_to_f32(uint16_t h) { return dtx_bits_f32((uint32_t)h << 16); }
static inline uint16_t dtx_f32_to_bf16(float f) {
    uint32_t u = dtx_f32_bits(f);
    /* Plain rounding could carry a NaN's low payload into inf (or cut it to
     * the inf pattern): keep the top bits and force the quiet bit instead. */
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}
/* f rounded to the nearest bf16 value, as a float (the operands of
 * emulated bf16 products). */
static inline float dtx_bf16_round_f32(float f) { return dtx_bf16_to_f32(dtx_f32_to_bf16(f)); }

#endif
