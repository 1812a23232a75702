/* Where a model's stored weights lie while it runs (model.h: qw, the bf16
 * weights in place and the int8 / 4-bit codes with their scales): moved,
 * after open, into one anonymous allocation in 2 MiB pages, every tensor at
 * a 64-byte boundary (dtx_model_settle_weights), by a thread of its own
 * while the model already runs from where the readers left them.
 *
 * Why not the file's own pages (a safetensors file mapped, as llama2.c maps
 * its checkpoint): a decode step streams every weight once, so how fast
 * memory hands them over is its speed, and the mapping loses twice.
 * Measured on Zen 5 (2 cores, 2026-12-04, the 0.8B BF16 file of
 * docs/huggingface.md, alternating runs in one process):
 *   - alignment: a safetensors file puts its tensors right after its header,
 *     8-byte aligned at best (difftx's files and Hugging Face's alike: the
 *     0.8B file's tensors start 56 bytes past a cache line), so every
 *     64-byte load of a row straddles two lines. The bf16 one-row products
 *     over a model's layers streamed 47–50 GB/s 56 bytes off against 62–64
 *     aligned;
 *   - pages: a plain sum reads the page cache's mapping of the file at about
 *     the speed of 4 KiB anonymous pages (63 GB/s; the same with the file's
 *     folios mapped 2 MiB at a time) and 2 MiB anonymous pages at 77.
 * The model's decode step went from 43 GB/s (27 tokens/s) to 58 (37).
 *
 * Why a thread, not a copy inside open: the copy's cost is the kernel
 * zeroing fresh pages, which on these VMs runs at 1–3 GB/s (the host backs
 * them on first touch): 1.5–6 s for a 2.7B model's 5.4 GB, against 0.9 s to
 * open it in place. The thread starts once the model's first step is done
 * (start_copy says why), and the model runs meanwhile from the old memory; at the
 * start of each layer of a forward, prefill or decode step
 * (dtx_model_settle_poll, on the caller's thread, so no kernel ever sees a
 * pointer change under it) the tensors copied so far switch to their new
 * place. The resident set stays near the weights' size: the thread gives a
 * file's pages back as soon as it has copied them, and the switch gives back
 * any the model read again in between; memory the readers
 * allocated themselves (a folder's moved tensors, a copy) goes as its
 * tensors switch. DTX_WEIGHTS_MAPPED=1 in the environment leaves the
 * weights where the readers put them (the comparison; a file's pages shared
 * between processes), as does a machine without the weights' size and 1 GiB
 * to spare (MemAvailable, which counts the page cache).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/team.h"
#include "model/model.h"

/* A run of bytes to move: from src to dst bytes into the new memory. */
typedef struct {
    const unsigned char *src;
    size_t dst, len;
    void **slot; /* the qw pointer that moves with it */
    int file;    /* src lies in a file mapping: its pages can be given back once moved */
} segment;

struct dtx_settle {
    pthread_t thread;
    int running;           /* the thread is started and not yet joined */
    int started;           /* the copy has begun (or will never: stopped before it began) */
    int64_t polls_left;    /* polls before the copy begins: the first step's layers */
    unsigned char *base;   /* the new memory, size bytes (dtx_alloc_huge) */
    size_t size, total;    /* total: the bytes to copy, in segment order */
    segment *seg;
    int n, moved;          /* segments [0, moved) point into base */
    int disjoint;          /* no two segments read the same byte */
    _Atomic size_t done;   /* bytes of base [0, done) copied (the thread's progress) */
    _Atomic int stop;      /* asked to stop early */
    size_t limit;          /* dtx_settle_test_copy_limit when it started */
};

size_t dtx_settle_test_copy_limit = SIZE_MAX;
int dtx_settle_test_hold;

#ifndef DTX_DOUBLE /* the settling copy moves quantised and bf16 weights: the float build's */
static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static int by_src(const void *a, const void *b) {
    const unsigned char *x = ((const segment *)a)->src, *y = ((const segment *)b)->src;
    return x < y ? -1 : x > y;
}

/* Whether no two of the n segments share a source byte. */
static int sources_disjoint(const segment *g, int n) {
    segment *t = malloc(sizeof *t * (size_t)n);
    if (!t) return 0;
    memcpy(t, g, sizeof *t * (size_t)n);
    qsort(t, (size_t)n, sizeof *t, by_src);
    int ok = 1;
    for (int i = 1; i < n && ok; i++) ok = t[i - 1].src + t[i - 1].len <= t[i].src;
    free(t);
    return ok;
}

int dtx_weights_mapped_asked(void) {
    const char *v = getenv("DTX_WEIGHTS_MAPPED");
    return v && strcmp(v, "1") == 0;
}

/* MemAvailable from /proc/meminfo in bytes (the kernel's estimate of what
 * can be had without swapping, reclaimable page cache included), or
 * SIZE_MAX where it cannot be read. */
static size_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return SIZE_MAX;
    char line[128];
    unsigned long long kib = 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    fclose(f);
    return found && kib < SIZE_MAX / 1024 ? (size_t)kib * 1024 : SIZE_MAX;
}

static void *copier(void *arg) {
    dtx_settle *s = arg;
    enum { WINDOW = 4 << 20 }; /* a multiple of 2 MiB: whole huge pages */
    int k = 0;
    for (size_t lo = 0; lo < s->total && lo < s->limit && !atomic_load_explicit(&s->stop, memory_order_relaxed);
         lo += WINDOW) {
        size_t hi = lo + WINDOW < s->total ? lo + WINDOW : s->total;
        dtx_prefault(s->base + lo, hi - lo, 1); /* one call, not a fault per page */
        while (k < s->n && s->seg[k].dst + s->seg[k].len <= lo) k++;
        for (int j = k; j < s->n && s->seg[j].dst < hi; j++) {
            const segment *g = &s->seg[j];
            size_t x = g->dst > lo ? g->dst : lo, y = g->dst + g->len < hi ? g->dst + g->len : hi;
            if (y <= x) continue;
            memcpy(s->base + x, g->src + (x - g->dst), y - x);
            /* a file's pages go now: one still read before its tensor moves comes back from the file */
            if (g->file) dtx_drop_pages(g->src + (x - g->dst), y - x);
        }
        atomic_store_explicit(&s->done, hi, memory_order_release);
    }
    return NULL;
}

/* Whether p lies in one of m's file mappings (not memory a reader allocated). */
static int in_file_mapping(const dtx_model *m, const void *p) {
    for (int i = 0; i < m->n_wmaps; i++) {
        const unsigned char *a = m->wmaps[i].data;
        if (!m->wmaps[i].heap && a && (const unsigned char *)p >= a && (const unsigned char *)p < a + m->wmaps[i].size)
            return 1;
    }
    return 0;
}

#endif

dtx_status dtx_model_settle_weights(dtx_model *m) {
#ifdef DTX_DOUBLE
    (void)m;
    return DTX_OK;
#else
    if (!m->qw || m->settle || dtx_weights_mapped_asked()) return DTX_OK;
    dtx_settle *s = calloc(1, sizeof *s);
    if (!s || !(s->seg = malloc(sizeof *s->seg * 2 * (size_t)m->n_tensors))) {
        free(s);
        return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    }
    size_t off = 0; /* the layout: each tensor's codes, then its scales, 64-byte aligned */
    for (int i = 0; i < m->n_tensors; i++) {
        dtx_qweight *w = &m->qw[i];
        if (!w->bits) continue;
        const dtx_qformat *f = dtx_qformat_of(w->bits);
        size_t qb = (size_t)(w->N * f->row_bytes(w->K)), sb = sizeof(float) * (size_t)(w->N * f->row_scales(w->K));
        s->seg[s->n++] = (segment){w->q, off, qb, &w->q, in_file_mapping(m, w->q)};
        off += align64(qb);
        if (sb) s->seg[s->n++] = (segment){(const unsigned char *)w->scale, off, sb, (void **)&w->scale,
                                           in_file_mapping(m, w->scale)};
        off += align64(sb);
    }
    s->total = off;
    /* memory the machine does not have to spare (its page cache counts as spare): the weights stay
     * where they are, rather than pushing the pages not yet copied out to be read from disk again */
    size_t avail = mem_available();
    if (s->n && (avail < ((size_t)1 << 30) || off > avail - ((size_t)1 << 30))) s->n = 0;
    if (!s->n || !(s->base = dtx_alloc_huge(off, &s->size))) {
        dtx_status st = s->n ? DTX_ERR_NOMEM : DTX_OK; /* dtx_alloc_huge said why */
        free(s->seg);
        free(s);
        return st;
    }
    s->disjoint = sources_disjoint(s->seg, s->n);
    s->limit = dtx_settle_test_copy_limit;
    s->polls_left = m->cfg.n_layers;
    m->settle = s;
    return DTX_OK;
#endif
}

/* The copier's start: at the first one-row step (a decode step:
 * dtx_team_in_step) after the model's first step, or when the copy is
 * waited for. Why not at open: the copy (the kernel zeroing fresh pages)
 * takes one of the two cores and memory bandwidth while the first step
 * reads every weight, and the first token is what a user waits for: the
 * 2.7B BF16 file's open to first token took 2.1-2.2 s with the copy
 * beside it, 1.4-1.8 s without (Zen 5, 2026-12-05). Why not during a
 * prompt: it slows the prompt as it slows the first token, and a prompt's
 * layer reads its weights for a long while, so those the copy moves
 * meanwhile come back from the file until the next layer switches them.
 * What it costs: a tensor that every step reads whole is resident twice
 * while it is being copied (the steps read back the pages the copy gave
 * back, until it switches), now after a prompt's buffers exist: the 0.8B
 * BF16 file's peak RSS with a 512-token prompt is 1.09-1.16x the file,
 * against 1.06-1.08 when the copy ran beside the first, one-token step
 * (README). Copying the largest of them, the embedding and the output
 * projection, on the model's thread before the step's head reads them
 * measured no lower (1.09-1.13 and 1.17-1.18 against 1.10-1.15 and
 * 1.16-1.23 for the 0.8B BF16 and w8a16 files, four alternated runs) and
 * was not kept. A model that only runs forward passes (score, eval) is
 * never copied: those are bound by arithmetic, not by reading the weights. */
static void start_copy(dtx_settle *s) {
    if (s->started) return;
    s->started = 1;
#ifndef DTX_DOUBLE
    /* no thread to be had: the copy here and now */
    if (pthread_create(&s->thread, NULL, copier, s) != 0) copier(s);
    else s->running = 1;
#endif
}

/* The copied segments point into the new memory; their file pages go. */
static void move_done(dtx_model *m) {
    if (dtx_settle_test_hold) return;
    dtx_settle *s = m->settle;
    size_t done = atomic_load_explicit(&s->done, memory_order_acquire);
    for (; s->moved < s->n && s->seg[s->moved].dst + s->seg[s->moved].len <= done; s->moved++) {
        segment *g = &s->seg[s->moved];
        *g->slot = s->base + g->dst;
        /* nothing reads the old bytes from now on. A file's pages went with the copy, but the model may have
         * read them again before this switch (a prompt's layer, a step's logits over the embedding), and
         * such pages stayed resident until the whole model had moved: the 0.8B w4a16 file's peak RSS with
         * a 512-token prompt was 1.30x the file in the bench, 1.21 with them given back here (Zen 5,
         * 2026-12-05). Memory a reader allocated goes where no other tensor reads it. */
        if (g->file || s->disjoint) dtx_drop_pages(g->src, g->len);
    }
}

static void join(dtx_settle *s) {
    if (s->running) pthread_join(s->thread, NULL);
    s->running = 0;
}

void dtx_model_settle_poll(dtx_model *m) {
    dtx_settle *s = m->settle;
    if (!s || !s->seg) return;
    if (!s->started) {
        if (s->polls_left > 0) {
            s->polls_left--;
            return;
        }
        if (!dtx_team_in_step()) return;
        start_copy(s);
    }
    move_done(m);
    if (s->moved < s->n) return;
    join(s); /* every tensor moved: the old memory goes */
    free(s->seg);
    s->seg = NULL;
    dtx_model_release_wmaps(m);
    dtx_free_lazy_zero(m->qmem, m->qmem_bytes, 1);
    m->qmem = NULL, m->qmem_bytes = 0;
}

void dtx_model_settle_wait(dtx_model *m) {
    dtx_settle *s = m->settle;
    if (!s || !s->seg) return;
    start_copy(s);
    join(s);
    dtx_model_settle_poll(m);
}

void dtx_model_settle_stop(dtx_model *m) {
    dtx_settle *s = m->settle;
    if (!s || !s->seg) return;
    atomic_store(&s->stop, 1);
    s->started = 1; /* a copy not yet begun never will */
    join(s);
    dtx_model_settle_poll(m); /* what was copied moves; the rest stays where it was, with its memory */
}

void dtx_model_settle_release(dtx_model *m) {
    dtx_settle *s = m->settle;
    if (!s) return;
    atomic_store(&s->stop, 1);
    join(s);
    dtx_free_lazy_zero(s->base, s->size, 1);
    free(s->seg);
    free(s);
    m->settle = NULL;
}
