/* Weights in place (model_io.c, linear.c): a BF16 model file is read where
 * it lies, its 2-D weights never copied into fp32. Against the same file
 * read into fp32 (DTX_WEIGHTS_COPY=1, what difftx did before): the same
 * logits from the full forward, a prefill and decode steps, in fp32 and in
 * bf16 precision, for every architecture; the weights widen into exactly
 * the copy's parameters when training, saving or asked; a weight that is
 * not finite is refused as before. */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "test.h"

enum { VOCAB = 48, SEQ = 24 };

static dtx_config config(dtx_arch arch) {
    dtx_config c = dtx_config_default();
    c.arch = arch;
    c.dim = 64, c.n_layers = 2, c.n_heads = arch == DTX_ARCH_TRANSFORMER ? 4 : 2, c.n_kv_heads = 1;
    c.ffn_dim = 96, c.vocab_size = VOCAB, c.max_seq_len = 32, c.tie_embeddings = arch != DTX_ARCH_DIFF;
    if (arch == DTX_ARCH_DIFF) c.ffn_dim = 4096; /* a file over 1 MiB: mapped, not read (common.h) */
    return c;
}

/* copy: 0 the weights as every command reads them (in place, moving to
 * memory of their own: weights_memory.c), 1 copied at open (into fp32, a
 * quantised file's codes into the model's memory: DTX_WEIGHTS_COPY) and
 * left there, 2 left where the readers put them (DTX_WEIGHTS_MAPPED), 3
 * copied at open, then moved as 0 moves them. */
/* A fresh model of arch (init seed) saved as BF16 under the test folder's
 * name; its path, or NULL (a failed check says why). */
static const char *saved_bf16(dtx_arch arch, uint64_t seed, const char *name) {
    dtx_config c = config(arch);
    dtx_model *src = NULL;
    const char *path = test_path(name);
    int ok = dtx_model_init(&src, &c, seed) == DTX_OK && dtx_model_save(src, path, 1) == DTX_OK;
    CHECKF(ok, "saving %s: %s", name, dtx_last_error());
    dtx_model_free(src);
    return ok ? path : NULL;
}

static dtx_model *open_file(const char *path, int copy) {
    if (copy == 1 || copy == 3) setenv("DTX_WEIGHTS_COPY", "1", 1);
    if (copy == 1 || copy == 2) setenv("DTX_WEIGHTS_MAPPED", "1", 1);
    dtx_model *m = NULL;
    dtx_status st = dtx_model_open(&m, path, DTX_PREC_FP32);
    unsetenv("DTX_WEIGHTS_COPY");
    unsetenv("DTX_WEIGHTS_MAPPED");
    return st == DTX_OK ? m : NULL;
}

/* The full forward's logits of tokens [SEQ], then prefill + 3 decodes. */
static void logits(dtx_model *m, const int32_t *tok, float *full, float *steps) {
    if (dtx_model_forward(m, tok, NULL, 1, SEQ, full, NULL) != DTX_OK) test_fail_at(__FILE__, __LINE__, "%s", dtx_last_error());
    dtx_kvcache *c = NULL;
    if (dtx_kvcache_init(&c, m, SEQ) != DTX_OK) {
        test_fail_at(__FILE__, __LINE__, "%s", dtx_last_error());
        return;
    }
    int ok = dtx_model_prefill(m, c, tok, SEQ - 3, steps) == DTX_OK;
    for (int i = 0; ok && i < 3; i++) ok = dtx_model_decode(m, c, tok[SEQ - 3 + i], steps + (i + 1) * VOCAB) == DTX_OK;
    if (!ok) test_fail_at(__FILE__, __LINE__, "%s", dtx_last_error());
    dtx_kvcache_free(c);
}

TEST(in_place_bf16_matches_the_fp32_copy) {
    int32_t tok[SEQ];
    for (int i = 0; i < SEQ; i++) tok[i] = (int32_t)((i * 7 + 3) % VOCAB);
    for (int arch = 0; arch < 3; arch++) {
        const char *path = saved_bf16((dtx_arch)arch, 11 + (uint64_t)arch, "w.bf16.safetensors");
        REQUIRE(path);
        dtx_model *a = open_file(path, 0), *b = open_file(path, 1);
        REQUIRE(a && b);
        CHECK(dtx_model_weights_in_place(a) && !dtx_model_weights_in_place(b));
        CHECKF(dtx_model_weight_bytes(a) * 3 < dtx_model_weight_bytes(b) * 2, "in place %zu bytes, copy %zu",
               dtx_model_weight_bytes(a), dtx_model_weight_bytes(b));
        for (int p = 0; p < 2; p++) {
            dtx_precision prec = p ? DTX_PREC_BF16 : DTX_PREC_FP32;
            REQUIRE(dtx_model_set_precision(a, prec) == DTX_OK && dtx_model_set_precision(b, prec) == DTX_OK);
            float fa[SEQ * VOCAB], fb[SEQ * VOCAB], sa[4 * VOCAB], sb[4 * VOCAB];
            logits(a, tok, fa, sa);
            logits(b, tok, fb, sb);
            double ef = rel_err_f(fa, fb, SEQ * VOCAB), es = rel_err_f(sa, sb, 4 * VOCAB);
            double tol = p ? 2e-3 : 1e-5; /* bf16: the same rounding points, another blocking of the products */
            CHECKF(ef <= tol && es <= tol, "%s %s: forward %.3g, prefill/decode %.3g", dtx_arch_name((dtx_arch)arch),
                   dtx_precision_name(prec), ef, es);
        }
        /* saving widens them, and the file is the one read */
        REQUIRE(dtx_model_save(a, test_path("again.safetensors"), 1) == DTX_OK);
        CHECK(!dtx_model_weights_in_place(a));
        size_t la, lb;
        char *x = test_slurp(path, &la), *y = test_slurp(test_path("again.safetensors"), &lb);
        CHECK(x && y && la == lb && memcmp(x, y, la) == 0);
        free(x), free(y);
        /* widened: exactly the copy's parameters */
        CHECK(memcmp(dtx_model_params(a), dtx_model_params(b), sizeof(real) * dtx_model_num_params(a)) == 0);
        dtx_model_free(a);
        dtx_model_free(b);
    }
}

/* Training from a model read in place: the backward widens the weights
 * first, and the step is the copy's. */
TEST(in_place_trains_as_the_copy) {
    const char *path = saved_bf16(DTX_ARCH_DIFF, 5, "t.bf16.safetensors");
    REQUIRE(path);
    dtx_model *a = open_file(path, 0), *b = open_file(path, 1);
    REQUIRE(a && b && dtx_model_weights_in_place(a));
    int32_t tok[SEQ], tgt[SEQ];
    for (int i = 0; i < SEQ; i++) tok[i] = (int32_t)((i * 5 + 1) % VOCAB), tgt[i] = (int32_t)((i * 5 + 6) % VOCAB);
    double la = 0, lb = 0;
    REQUIRE(dtx_model_forward(a, tok, tgt, 1, SEQ, NULL, &la) == DTX_OK);
    REQUIRE(dtx_model_forward(b, tok, tgt, 1, SEQ, NULL, &lb) == DTX_OK);
    CHECKF(fabs(la - lb) <= 1e-6 * fabs(lb), "loss %.9g in place, %.9g copied", la, lb);
    REQUIRE(dtx_model_backward(a, 1.0) == DTX_OK && dtx_model_backward(b, 1.0) == DTX_OK);
    CHECK(!dtx_model_weights_in_place(a));
    CHECK(rel_err_f(dtx_model_grads(a), dtx_model_grads(b), dtx_model_num_params(a)) <= 1e-5);
    dtx_model_free(a);
    dtx_model_free(b);
}

/* A NaN in a BF16 weight is refused in place as when copied, naming the tensor. */
TEST(in_place_refuses_what_the_copy_refuses) {
    dtx_config c = config(DTX_ARCH_TRANSFORMER);
    dtx_model *src = NULL;
    REQUIRE(dtx_model_init(&src, &c, 2) == DTX_OK);
    const dtx_tensor_info *t = dtx_model_find(src, "layers.1.feed_forward.w2.weight");
    REQUIRE(t);
    dtx_model_params(src)[t->offset + 17] = NAN;
    const char *path = test_path("nan.safetensors");
    REQUIRE(dtx_model_save(src, path, 1) == DTX_OK);
    dtx_model_free(src);
    for (int copy = 0; copy < 2; copy++) {
        CHECK(open_file(path, copy) == NULL);
        CHECKF(strstr(dtx_last_error(), "'layers.1.feed_forward.w2.weight' holds NaN at element 17") != NULL, "%s",
               dtx_last_error());
    }
}

/* Quantising a model read in place streams (a tensor at a time from the
 * file) and gives the model that quantising the fp32 copy gives: the same
 * logits, every scheme. */
TEST(in_place_quantises_as_the_copy) {
    static const dtx_wquant schemes[] = {DTX_WQ_W8A16, DTX_WQ_W8A8, DTX_WQ_W4A16};
    int32_t calib[4 * SEQ], tok[SEQ];
    for (int i = 0; i < 4 * SEQ; i++) calib[i] = (int32_t)((i * 13 + 5) % VOCAB);
    for (int i = 0; i < SEQ; i++) tok[i] = (int32_t)((i * 3 + 2) % VOCAB);
    for (int arch = 1; arch < 3; arch++) { /* DIFF is the wide one above: V2 and the Transformer suffice here */
        const char *path = saved_bf16((dtx_arch)arch, 21, "q.bf16.safetensors");
        REQUIRE(path);
        for (size_t s = 0; s < sizeof schemes / sizeof *schemes; s++) {
            dtx_model *a = open_file(path, 0), *b = open_file(path, 1);
            REQUIRE(a && b && dtx_model_weights_in_place(a));
            dtx_quant_options o = dtx_quant_options_default(schemes[s]);
            REQUIRE(dtx_model_quantize(a, &o, calib, 4, SEQ, NULL) == DTX_OK);
            REQUIRE(dtx_model_quantize(b, &o, calib, 4, SEQ, NULL) == DTX_OK);
            CHECK(!dtx_model_weights_in_place(a) && dtx_model_wquant(a) == schemes[s]);
            CHECK(dtx_model_weight_bytes(a) == dtx_model_weight_bytes(b));
            float fa[SEQ * VOCAB], fb[SEQ * VOCAB];
            REQUIRE(dtx_model_forward(a, tok, NULL, 1, SEQ, fa, NULL) == DTX_OK);
            REQUIRE(dtx_model_forward(b, tok, NULL, 1, SEQ, fb, NULL) == DTX_OK);
            double e = rel_err_f(fa, fb, SEQ * VOCAB);
            CHECKF(e <= 1e-5, "%s %s: quantised in place vs copy: %.3g", dtx_arch_name((dtx_arch)arch),
                   dtx_wquant_name(schemes[s]), e);
            dtx_model_free(a);
            dtx_model_free(b);
        }
    }
}

/* A quantised file's codes and scales can be read where they lie in its
 * mapping (DTX_WEIGHTS_MAPPED: no copy into the model's memory) and give the
 * logits the copy gives, bit for bit: every scheme; a scale the reader refuses is refused
 * the same way in place. */
TEST(in_place_quantised_file_reads_codes_where_they_lie) {
    static const dtx_wquant schemes[] = {DTX_WQ_W8A16, DTX_WQ_W8A8, DTX_WQ_W4A16};
    int32_t calib[4 * SEQ], tok[SEQ];
    for (int i = 0; i < 4 * SEQ; i++) calib[i] = (int32_t)((i * 11 + 1) % VOCAB);
    for (int i = 0; i < SEQ; i++) tok[i] = (int32_t)((i * 5 + 4) % VOCAB);
    dtx_config c = config(DTX_ARCH_DIFF);
    c.ffn_dim = 8192; /* wide: even its 4-bit file is over 1 MiB, mapped, not read */
    for (size_t s = 0; s < sizeof schemes / sizeof *schemes; s++) {
        dtx_model *src = NULL;
        REQUIRE(dtx_model_init(&src, &c, 31) == DTX_OK);
        dtx_quant_options o = dtx_quant_options_default(schemes[s]);
        REQUIRE(dtx_model_quantize(src, &o, calib, 4, SEQ, NULL) == DTX_OK);
        const char *path = test_path("q.safetensors");
        REQUIRE(dtx_model_save(src, path, 0) == DTX_OK);
        dtx_model_free(src);
        dtx_model *a = open_file(path, 2), *b = open_file(path, 1);
        REQUIRE(a && b);
        int w2 = (int)(dtx_model_find(a, "layers.1.feed_forward.w2.weight") - dtx_model_tensor(a, 0));
        const char *map = a->n_wmaps == 1 ? a->wmaps[0].data : NULL;
        CHECKF(map && !a->qmem && b->qmem && (const char *)a->qw[w2].q > map &&
                   (const char *)a->qw[w2].scale < map + a->wmaps[0].size,
               "%s: codes in the file's mapping", dtx_wquant_name(schemes[s]));
        CHECK(dtx_model_weight_bytes(a) == dtx_model_weight_bytes(b));
        float fa[SEQ * VOCAB], fb[SEQ * VOCAB], sa[4 * VOCAB], sb[4 * VOCAB];
        logits(a, tok, fa, sa);
        logits(b, tok, fb, sb);
        CHECKF(memcmp(fa, fb, sizeof fa) == 0 && memcmp(sa, sb, sizeof sa) == 0, "%s: in place vs copy",
               dtx_wquant_name(schemes[s]));
        /* a negative scale, written into the file: refused in place as in the copy */
        const dtx_st_tensor *t = NULL;
        dtx_st_file f;
        REQUIRE(dtx_st_open(&f, path) == DTX_OK);
        t = dtx_st_find(&f, "layers.1.feed_forward.w2.weight.scale");
        REQUIRE(t);
        long at = (long)(t->data - (const uint8_t *)f.file.data);
        dtx_st_close(&f);
        dtx_model_free(a);
        dtx_model_free(b);
        FILE *fp = fopen(path, "r+b");
        REQUIRE(fp);
        float neg = -1.0f;
        CHECK(fseek(fp, at + 4 * 3, SEEK_SET) == 0 && fwrite(&neg, 4, 1, fp) == 1);
        fclose(fp);
        for (int copy = 0; copy < 2; copy++) {
            CHECK(open_file(path, copy) == NULL);
            CHECKF(strstr(dtx_last_error(), "'layers.1.feed_forward.w2.weight.scale' element 3 is -1") != NULL,
                   "copy %d: %s", copy, dtx_last_error());
        }
    }
}

/* Every weight m holds outside params lies 64-byte aligned in the memory
 * the settle allocated, and no file or reader memory is held any more. */
static int settled(const dtx_model *m) {
    if (m->n_wmaps || m->qmem || !m->settle) return 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const dtx_qweight *w = &m->qw[i];
        if (!w->bits) continue;
        if ((uintptr_t)w->q % 64) return 0;
        if (dtx_qformat_of(w->bits)->row_scales(w->K) && (uintptr_t)w->scale % 64) return 0;
    }
    return 1;
}

/* Weights settling into memory of their own (weights_memory.c): a model
 * file's bf16 weights, and a quantised file's codes and scales, give the
 * logits they give where the reader left them (DTX_WEIGHTS_MAPPED), bit for
 * bit, while the copy runs, once it is done (every tensor then aligned and
 * the file let go), and when it is stopped half-way; quantising in place
 * works from settled weights. */
TEST(in_place_weights_settle_into_their_own_memory) {
    static const dtx_wquant schemes[] = {DTX_WQ_NONE, DTX_WQ_W8A16, DTX_WQ_W4A16};
    int32_t calib[4 * SEQ], tok[SEQ];
    for (int i = 0; i < 4 * SEQ; i++) calib[i] = (int32_t)((i * 7 + 3) % VOCAB);
    for (int i = 0; i < SEQ; i++) tok[i] = (int32_t)((i * 5 + 1) % VOCAB);
    dtx_config c = config(DTX_ARCH_DIFF);
    c.ffn_dim = 8192; /* every file over 1 MiB: mapped, not read */
    for (size_t s = 0; s < sizeof schemes / sizeof *schemes; s++) {
        dtx_model *src = NULL;
        REQUIRE(dtx_model_init(&src, &c, 41) == DTX_OK);
        dtx_quant_options o = dtx_quant_options_default(schemes[s]);
        if (schemes[s] != DTX_WQ_NONE) REQUIRE(dtx_model_quantize(src, &o, calib, 4, SEQ, NULL) == DTX_OK);
        const char *path = test_path("settle.safetensors");
        REQUIRE(dtx_model_save(src, path, schemes[s] == DTX_WQ_NONE) == DTX_OK);
        dtx_model_free(src);
        const char *name = schemes[s] == DTX_WQ_NONE ? "bf16" : dtx_wquant_name(schemes[s]);
        dtx_model *ref = open_file(path, 2), *a = open_file(path, 0), *h = open_file(path, 0), *cp = open_file(path, 3);
        REQUIRE(ref && a && h && cp);
        CHECKF(!ref->settle && ref->n_wmaps == 1, "%s: DTX_WEIGHTS_MAPPED leaves the file mapped", name);
        dtx_model_settle_stop(h); /* wherever the copy got to */
        float fr[SEQ * VOCAB], sr[4 * VOCAB], fa[SEQ * VOCAB], sa[4 * VOCAB], fh[SEQ * VOCAB], sh[4 * VOCAB];
        logits(ref, tok, fr, sr);
        logits(a, tok, fa, sa); /* the copy may still be running */
        logits(h, tok, fh, sh);
        CHECKF(memcmp(fr, fa, sizeof fr) == 0 && memcmp(sr, sa, sizeof sr) == 0, "%s: while settling", name);
        CHECKF(memcmp(fr, fh, sizeof fr) == 0 && memcmp(sr, sh, sizeof sr) == 0, "%s: stopped half-way", name);
        dtx_model_settle_wait(a);
        CHECKF(settled(a), "%s: every weight 64-byte aligned in its own memory, the file let go", name);
        logits(a, tok, fa, sa);
        CHECKF(memcmp(fr, fa, sizeof fr) == 0 && memcmp(sr, sa, sizeof sr) == 0, "%s: settled", name);
        if (schemes[s] != DTX_WQ_NONE) { /* codes copied at open (the model's own memory), then moved */
            dtx_model_settle_wait(cp);
            CHECKF(settled(cp), "%s: settled from a copy", name);
            logits(cp, tok, fa, sa);
            CHECKF(memcmp(fr, fa, sizeof fr) == 0 && memcmp(sr, sa, sizeof sr) == 0, "%s: settled from a copy", name);
        }
        if (schemes[s] == DTX_WQ_NONE) { /* quantising from settled bf16, against from the mapping */
            dtx_quant_options q = dtx_quant_options_default(DTX_WQ_W8A16);
            REQUIRE(dtx_model_quantize(a, &q, calib, 4, SEQ, NULL) == DTX_OK);
            REQUIRE(dtx_model_quantize(ref, &q, calib, 4, SEQ, NULL) == DTX_OK);
            CHECK(!a->settle && !ref->settle && !dtx_model_weights_in_place(a));
            logits(ref, tok, fr, sr);
            logits(a, tok, fa, sa);
            CHECKF(memcmp(fr, fa, sizeof fr) == 0, "quantised from settled bf16");
        }
        dtx_model_free(ref);
        dtx_model_free(a);
        dtx_model_free(h);
        dtx_model_free(cp);
    }
}

/* Whether the page holding p is mapped in this process (/proc/self/pagemap's
 * present bit, which it shows without privileges); -1 where it cannot say. */
static int page_present(const void *p) {
    FILE *f = fopen("/proc/self/pagemap", "rb");
    if (!f) return -1;
    uint64_t e = 0;
    long pg = sysconf(_SC_PAGESIZE);
    int ok = fseeko(f, (off_t)((uintptr_t)p / (uintptr_t)pg * sizeof e), SEEK_SET) == 0 &&
             fread(&e, sizeof e, 1, f) == 1;
    fclose(f);
    return ok ? (int)(e >> 63) : -1;
}

/* Of the whole pages in [p, p + len): how many there are (*pages), how
 * many page_present could not say for (*unknown); returns how many are
 * mapped. */
static int whole_pages_mapped(const void *p, size_t len, int *pages, int *unknown) {
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), end = (uintptr_t)p + len;
    int mapped = 0;
    for (uintptr_t a = ((uintptr_t)p + pg - 1) & ~(pg - 1); a + pg <= end; a += pg) {
        int present = page_present((const void *)a);
        (*pages)++, mapped += present == 1, *unknown += present < 0;
    }
    return mapped;
}

/* The bytes of a stored weight's codes (or bf16 values). */
static size_t code_bytes(const dtx_qweight *w) { return (size_t)(w->N * dtx_qformat_of(w->bits)->row_bytes(w->K)); }

enum { MAX_TENSORS = 64 };

/* A tensor's file pages that the model read again after the copy had given
 * them back (a prompt's layer, a step's logits, before the tensor switched
 * to its copy) go when it switches, not when the whole model has moved:
 * they made the 0.8B w4a16 file's peak RSS 1.30x the file instead of 1.21
 * (weights_memory.c). The copy stops part-way and the switch is held, every
 * tensor's old pages are read, then the switch: none of a moved tensor's
 * whole pages is mapped any more, and the tensors not moved still read
 * from the file. */
TEST(in_place_moved_tensors_give_back_pages_read_again) {
    int here = 1;
    if (page_present(&here) != 1) SKIP("/proc/self/pagemap does not show which pages are mapped here");
    dtx_config c = config(DTX_ARCH_DIFF);
    c.ffn_dim = 32768; /* 4 MiB tensors: the copy stops between them */
    dtx_model *src = NULL;
    REQUIRE(dtx_model_init(&src, &c, 43) == DTX_OK);
    const char *path = test_path("regive.safetensors");
    REQUIRE(dtx_model_save(src, path, 1) == DTX_OK);
    dtx_model_free(src);
    dtx_settle_test_copy_limit = (size_t)8 << 20, dtx_settle_test_hold = 1;
    dtx_model *m = open_file(path, 0);
    REQUIRE(m && m->settle && m->n_wmaps == 1);
    dtx_model_settle_wait(m); /* the copier is done with its 8 MiB; nothing has switched */
    const unsigned char *map = m->wmaps[0].data, *map_end = map + m->wmaps[0].size;
    REQUIRE(m->n_tensors <= MAX_TENSORS);
    const unsigned char *old[MAX_TENSORS] = {0};
    size_t len[MAX_TENSORS] = {0};
    long pg = sysconf(_SC_PAGESIZE);
    volatile unsigned sum = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const dtx_qweight *w = &m->qw[i];
        if (!w->bits) continue;
        old[i] = w->q, len[i] = code_bytes(w);
        CHECKF(old[i] >= map && old[i] + len[i] <= map_end, "tensor %d switched while held", i);
        for (size_t o = 0; o < len[i]; o += (size_t)pg) sum += old[i][o]; /* read again after the copy */
    }
    dtx_settle_test_hold = 0;
    dtx_model_settle_poll(m);
    int moved = 0, kept = 0, mapped = 0, pages = 0, unknown = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        if (!old[i]) continue;
        if ((const unsigned char *)m->qw[i].q == old[i]) {
            kept++;
            continue;
        }
        moved++;
        mapped += whole_pages_mapped(old[i], len[i], &pages, &unknown);
    }
    CHECKF(moved > 0 && kept > 0, "the copy stopped part-way: %d tensors moved, %d not", moved, kept);
    CHECKF(unknown == 0, "/proc/self/pagemap could not say for %d pages", unknown);
    CHECKF(mapped == 0, "%d pages of the moved tensors still mapped from the file", mapped);
    dtx_settle_test_copy_limit = SIZE_MAX;
    dtx_model_free(m);
    (void)sum;
}

/* The copy begins with the first decode step after the model's first step
 * (weights_memory.c: beside the first step it slowed the first token by
 * 0.3-0.6 s at 2.7B, beside a prompt it held a layer's weights twice):
 * after a one-token step and a prompt, each followed by time for a copy to
 * have run, every page of every tensor is still mapped from the file (a
 * running copy gives them back as it goes); a decode step begins it, and
 * the weights settle. */
static int weight_pages_gone(const dtx_model *m, const void *const *at, int *pages) {
    int gone = 0;
    *pages = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const dtx_qweight *w = &m->qw[i];
        if (!w->bits) continue;
        if (w->q != at[i]) { /* moved to its copy: its file pages are the copy's to give back */
            gone++;
            continue;
        }
        int n = 0, unknown = 0, mapped = whole_pages_mapped(w->q, code_bytes(w), &n, &unknown);
        *pages += n, gone += n - mapped; /* a page it cannot say for counts as gone */
    }
    return gone;
}

TEST(in_place_copy_begins_after_the_first_step) {
    int here = 1;
    if (page_present(&here) != 1) SKIP("/proc/self/pagemap does not show which pages are mapped here");
    dtx_config c = config(DTX_ARCH_DIFF);
    c.ffn_dim = 8192; /* over 1 MiB: mapped, not read */
    dtx_model *src = NULL;
    REQUIRE(dtx_model_init(&src, &c, 45) == DTX_OK);
    const char *path = test_path("first_step.safetensors");
    REQUIRE(dtx_model_save(src, path, 1) == DTX_OK);
    dtx_model_free(src);
    dtx_model *m = open_file(path, 0);
    REQUIRE(m && m->settle && m->n_wmaps == 1 && m->n_tensors <= MAX_TENSORS);
    const void *at[MAX_TENSORS];
    for (int i = 0; i < m->n_tensors; i++) at[i] = m->qw[i].q;
    dtx_kvcache *kv = NULL;
    REQUIRE(dtx_kvcache_init(&kv, m, SEQ) == DTX_OK);
    float lg[VOCAB];
    const int32_t tok[4] = {3, 7, 11, 5};
    REQUIRE(dtx_model_prefill(m, kv, tok, 1, lg) == DTX_OK); /* reads every weight from the file */
    usleep(100 * 1000);
    int pages = 0, gone = weight_pages_gone(m, at, &pages);
    CHECKF(pages > 0 && gone == 0, "after one step, %d of %d weight pages already given back or moved: the copy ran",
           gone, pages);
    REQUIRE(dtx_model_prefill(m, kv, tok + 1, 2, lg) == DTX_OK);
    usleep(100 * 1000);
    gone = weight_pages_gone(m, at, &pages);
    CHECKF(gone == 0, "after a prompt, %d of %d weight pages already given back or moved: the copy ran", gone, pages);
    REQUIRE(dtx_model_decode(m, kv, tok[3], lg) == DTX_OK);
    dtx_model_settle_wait(m);
    CHECKF(settled(m), "settled after the second step");
    dtx_kvcache_free(kv);
    dtx_model_free(m);
}

/* The KV cache type the commands take unless told (dtx_kv_type_for): bf16
 * for weights used in place from a BF16 file or quantised, fp32 for fp32
 * weights (a fresh model, a BF16 file copied into fp32 at open) and for
 * quantised attention logits, which a bf16 cache cannot run. */
TEST(in_place_kv_cache_type_follows_the_weights) {
    const char *path = saved_bf16(DTX_ARCH_DIFF, 3, "kvtype_bf16.safetensors");
    REQUIRE(path);
    dtx_config c = config(DTX_ARCH_DIFF);
    dtx_model *fresh = NULL, *in_place = open_file(path, 0), *copied = open_file(path, 1);
    REQUIRE(dtx_model_init(&fresh, &c, 3) == DTX_OK && in_place && copied);
    CHECK(dtx_kv_type_for(fresh) == DTX_KV_FP32);
    CHECK(dtx_model_weights_in_place(in_place) && dtx_kv_type_for(in_place) == DTX_KV_BF16);
    CHECK(!dtx_model_weights_in_place(copied) && dtx_kv_type_for(copied) == DTX_KV_FP32);
    CHECK(dtx_kv_type_for(NULL) == DTX_KV_FP32);
    REQUIRE(dtx_model_set_attention_quant(in_place, 8, DTX_QUANT_ROW) == DTX_OK);
    CHECK(dtx_kv_type_for(in_place) == DTX_KV_FP32);
    int32_t tok[2 * SEQ];
    for (int i = 0; i < 2 * SEQ; i++) tok[i] = (int32_t)((i * 7 + 1) % VOCAB);
    dtx_quant_options o = dtx_quant_options_default(DTX_WQ_W8A16);
    REQUIREF(dtx_model_quantize(fresh, &o, tok, 2, SEQ, NULL) == DTX_OK, "%s", dtx_last_error());
    CHECK(dtx_kv_type_for(fresh) == DTX_KV_BF16);
    dtx_model_free(fresh), dtx_model_free(in_place), dtx_model_free(copied);
}
