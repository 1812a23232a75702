/* Quantised models (linear.c): every scheme, both archs, tied and untied.
 *  - the several-row path (dtx_model_forward) and the one-row path
 *    (decode: the quantised kernels) give the same logits, and the
 *    several-row products the one-row bits where they take the batched
 *    kernels (4-bit, and 8-bit up to 128 rows);
 *  - the forward equals the fp32 forward of the dequantised weights to the
 *    rounding of the inputs (bf16, or the int8 grid for W8A8);
 *  - W8A8's attention inputs q, k lie on their int8 grids;
 *  - the embedding reads the dequantised rows;
 *  - refusals: backward, quantising twice, W8A8 without scales. */
#include "../test.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { VOCAB = 67, T = 24 };

/* ffn 88 is not a multiple of 32: a partial 4-bit group */
static dtx_config qconfig(dtx_arch arch, int tie) {
    int64_t h = arch == DTX_ARCH_DIFF ? 2 : 4;
    return test_config(arch, 64, 2, h, h, VOCAB, 88, T, tie);
}

static void tokens_of(int32_t *t, int64_t n, uint64_t seed) {
    dtx_rng r;
    dtx_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) t[i] = (int32_t)(dtx_rng_next(&r) % VOCAB);
}

/* W8A8's static scales for the test: each 2-D tensor's input and q, k take
 * one scale (what calibration would pick is the quantize command's business). */
static void test_scales(const dtx_model *m, float *in, float *qk) {
    for (int i = 0; i < m->n_tensors; i++) in[i] = m->tensors[i].ndim == 2 ? 0.03f : 0;
    for (int64_t l = 0; l < 2 * m->cfg.n_layers; l++) qk[l] = 0.02f;
}

static double max_rel(const float *a, const float *b, size_t n) {
    double worst = 0, mag = 0;
    for (size_t i = 0; i < n; i++) mag = fmax(mag, fabs(b[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]));
    return worst / (mag + 1e-30);
}

TEST(model_wquant_paths_agree_and_match_dequantised) {
    static const dtx_wquant schemes[] = {DTX_WQ_W8A16, DTX_WQ_W8A8, DTX_WQ_W4A16};
    int32_t tok[T];
    tokens_of(tok, T, 5);
    for (int arch = 0; arch < 2; arch++)
        for (int tie = 0; tie < 2; tie++)
            for (int si = 0; si < 3; si++) {
                dtx_wquant sch = schemes[si];
                dtx_config c = qconfig(arch ? DTX_ARCH_TRANSFORMER : DTX_ARCH_DIFF, tie);
                dtx_model *q = NULL, *ref = NULL;
                REQUIRE(dtx_model_init(&q, &c, 41 + (uint64_t)arch) == DTX_OK);
                REQUIRE(dtx_model_init(&ref, &c, 41 + (uint64_t)arch) == DTX_OK);
                float *in = calloc((size_t)q->n_tensors, sizeof(float)), qk[8];
                test_scales(q, in, qk);
                REQUIREF(dtx_model_quantize_weights(q, sch, NULL, in, qk) == DTX_OK, "%s", dtx_last_error());
                CHECK(dtx_model_wquant(q) == sch);
                /* the reference: fp32 params holding the dequantised weights */
                for (int i = 0; i < q->n_tensors; i++) {
                    const dtx_qweight *w = &q->qw[i];
                    if (!w->bits) continue;
                    /* W4A16: the layers' weights 4-bit, the embedding and the output 8-bit */
                    int table = q->tensors[i].offset == q->tok_emb || q->tensors[i].offset == q->out_w;
                    CHECKF(w->bits == (sch == DTX_WQ_W4A16 && !table ? 4 : 8), "%s: '%s' has %d bits",
                           dtx_wquant_name(sch), q->tensors[i].name, w->bits);
                    float *dst = ref->params + ref->tensors[i].offset;
                    if (w->bits == 8) dtx_q8_dequantize(dst, w->q, w->scale, w->N, w->K);
                    else dtx_q4_dequantize(dst, w->q, w->scale, w->N, w->K);
                    for (size_t j = 0; j < q->tensors[i].numel; j++) /* zeroed in the quantised model */
                        CHECK(q->params[q->tensors[i].offset + j] == 0);
                }
                float *lq = malloc(sizeof(float) * T * VOCAB), *lr = malloc(sizeof(float) * T * VOCAB);
                float *ld = malloc(sizeof(float) * VOCAB);
                REQUIRE(dtx_model_forward(q, tok, NULL, 1, T, lq, NULL) == DTX_OK);
                REQUIRE(dtx_model_forward(ref, tok, NULL, 1, T, lr, NULL) == DTX_OK);
                /* the inputs' rounding: bf16 (2^-9 relative) or the int8 grid of the test's scales */
                double d_ref = max_rel(lq, lr, (size_t)(T * VOCAB));
                CHECKF(d_ref < (sch == DTX_WQ_W8A8 ? 0.25 : 0.03), "%s %s tie %d: quantised vs dequantised fp32 %.3g",
                       dtx_wquant_name(sch), dtx_arch_name(c.arch), tie, d_ref);
                CHECKF(d_ref > 0, "%s: the inputs' rounding must show", dtx_wquant_name(sch));
                /* decode one token at a time: the one-row kernels */
                dtx_kvcache *kc = NULL;
                REQUIRE(dtx_kvcache_init(&kc, q, T) == DTX_OK);
                /* Both paths round the same inputs, but an input within 1e-7 of a rounding boundary can
                 * land on either side (one bf16 ulp, or one int8 step, of one element) and the cache
                 * carries that on: the first token (no cache) agrees to fp32 rounding, the rest to a
                 * flip's effect. A wiring error (a wrong tensor, scale or layout) is off by O(1). */
                double d_dec = 0, d_first = 0;
                for (int64_t i = 0; i < T; i++) {
                    REQUIRE(dtx_model_decode(q, kc, tok[i], ld) == DTX_OK);
                    double d = max_rel(ld, lq + i * VOCAB, VOCAB);
                    d_dec = fmax(d_dec, d);
                    if (i == 0) d_first = d;
                }
                CHECKF(d_first < 1e-5 && d_dec < (sch == DTX_WQ_W8A8 ? 0.05 : 0.02),
                       "%s %s tie %d: decode vs forward %.3g (first token %.3g)", dtx_wquant_name(sch),
                       dtx_arch_name(c.arch), tie, d_dec, d_first);
                /* a prefill of the whole prompt: the several-row path again, its last row */
                dtx_kvcache_reset(kc);
                REQUIRE(dtx_model_prefill(q, kc, tok, T, ld) == DTX_OK);
                CHECKF(max_rel(ld, lq + (T - 1) * VOCAB, VOCAB) < 1e-5, "%s: prefill vs forward",
                       dtx_wquant_name(sch));
                /* W8A8: q and k (after RoPE) on their grids */
                if (sch == DTX_WQ_W8A8) {
                    const float *qa = q->acts.layers[1].q;
                    int off_grid = 0;
                    for (int64_t j = 0; j < T * c.dim; j++) {
                        float v = qa[j] / qk[2], r = rintf(v);
                        off_grid += fabsf(v - r) > 1e-3f || fabsf(r) > 127;
                    }
                    CHECKF(off_grid == 0, "w8a8: %d values of q are off the int8 grid", off_grid);
                }
                /* the embedding reads the dequantised rows */
                float row[64];
                dtx_model_embed(q, row, tok, 1);
                CHECK(memcmp(row, ref->params + ref->tok_emb + (size_t)tok[0] * 64, sizeof row) == 0);
                /* refusals */
                CHECK(dtx_model_backward(q, 1.0) == DTX_ERR_ARG);
                CHECK(dtx_model_quantize_weights(q, sch, NULL, in, qk) == DTX_ERR_ARG);
                dtx_kvcache_free(kc);
                free(lq), free(lr), free(ld), free(in);
                dtx_model_free(q), dtx_model_free(ref);
            }
}

/* A several-row product (a prefill's, a forward's) of a quantised weight:
 * 4-bit at any row count, and 8-bit up to 128 rows, give every row the bits
 * of its one-row product (the decode step's batched kernels); 8-bit at more
 * rows (dequantised blocks and the matmul) agree to rounding. */
TEST(model_wquant_several_rows_have_the_one_row_bits) {
    static const dtx_wquant schemes[] = {DTX_WQ_W8A16, DTX_WQ_W8A8, DTX_WQ_W4A16};
    static const int64_t rows[] = {1, 3, 128, 129, 300};
    for (int si = 0; si < 3; si++) {
        dtx_config c = qconfig(DTX_ARCH_DIFF, 0);
        dtx_model *q = NULL;
        REQUIRE(dtx_model_init(&q, &c, 43) == DTX_OK);
        float *in = calloc((size_t)q->n_tensors, sizeof(float)), qk[8];
        test_scales(q, in, qk);
        REQUIREF(dtx_model_quantize_weights(q, schemes[si], NULL, in, qk) == DTX_OK, "%s", dtx_last_error());
        const size_t off = q->layers[0].w2; /* K = 88: a partial 4-bit group */
        const dtx_qweight *w = dtx_model_qweight(q, off);
        REQUIRE(w);
        const int64_t K = w->K, N = w->N, MAXR = 300;
        float *x = malloc(sizeof(float) * (size_t)(MAXR * K)), *several = malloc(sizeof(float) * (size_t)(MAXR * N));
        float *one = malloc(sizeof(float) * (size_t)N), *xrow = malloc(sizeof(float) * (size_t)K);
        REQUIRE(x && several && one && xrow);
        dtx_rng r;
        dtx_rng_seed(&r, 9);
        for (int64_t i = 0; i < MAXR * K; i++) x[i] = (float)(0.5 * dtx_rng_normal(&r));
        for (int ri = 0; ri < 5; ri++) {
            const int64_t M = rows[ri];
            dtx_model_linear(q, several, x, off, M, K, N, 0);
            const int batched = w->bits == 4 || M <= 128;
            double worst = 0;
            int differ = 0;
            for (int64_t i = 0; i < M; i++) {
                dtx_model_linear_rows(q, one, x + i * K, 1, off, K, N, NULL, xrow);
                differ += memcmp(one, several + i * N, sizeof(float) * (size_t)N) != 0;
                worst = fmax(worst, max_rel(several + i * N, one, (size_t)N));
            }
            if (batched)
                CHECKF(differ == 0, "%s, %lld rows: %d rows differ from their one-row bits",
                       dtx_wquant_name(schemes[si]), (long long)M, differ);
            else
                CHECKF(worst < 1e-5, "%s, %lld rows: %.3g from the one-row products", dtx_wquant_name(schemes[si]),
                       (long long)M, worst);
        }
        free(x), free(several), free(one), free(xrow), free(in);
        dtx_model_free(q);
    }
}

/* A long prompt of a quantised model runs its feed-forward in blocks of
 * dtx_model_linear_row_block rows (generate.c): the same bits as all rows at
 * once, which a prefill watched by an observer of the products' inputs
 * still runs (calibration sees every row). 600 rows: two full blocks and a
 * partial one; the logits of the last row and of the step after are equal. */
static void count_inputs(void *ctx, size_t off, const real *x, int64_t M, int64_t K) {
    (void)off, (void)x, (void)K;
    int64_t *most = ctx; /* the most rows one product took */
    if (M > *most) *most = M;
}

TEST(model_wquant_long_prefill_feed_forward_in_blocks) {
    static const dtx_wquant schemes[] = {DTX_WQ_W8A16, DTX_WQ_W8A8, DTX_WQ_W4A16};
    enum { LONG = 600 };
    int32_t tok[LONG + 1];
    tokens_of(tok, LONG + 1, 17);
    for (int si = 0; si < 3; si++) {
        dtx_config c = test_config(DTX_ARCH_DIFF, 64, 2, 2, 2, VOCAB, 88, LONG + 1, 0);
        dtx_model *q = NULL;
        REQUIRE(dtx_model_init(&q, &c, 47) == DTX_OK);
        float *in = calloc((size_t)q->n_tensors, sizeof(float)), qk[8];
        test_scales(q, in, qk);
        REQUIREF(dtx_model_quantize_weights(q, schemes[si], NULL, in, qk) == DTX_OK, "%s", dtx_last_error());
        const int64_t blk = dtx_model_linear_row_block(q);
        CHECKF(blk > 0 && blk < LONG / 2, "the products' row block is %lld", (long long)blk);
        dtx_kvcache *a = NULL, *b = NULL;
        REQUIRE(dtx_kvcache_init(&a, q, LONG + 1) == DTX_OK && dtx_kvcache_init(&b, q, LONG + 1) == DTX_OK);
        float la[VOCAB], lb[VOCAB];
        int64_t most = 0;
        const dtx_prefill_hooks hk = {.ctx = &most, .linear_input = count_inputs};
        dtx_kvcache_set_hooks(b, &hk);
        REQUIRE(dtx_model_prefill(q, a, tok, LONG, la) == DTX_OK);
        REQUIRE(dtx_model_prefill(q, b, tok, LONG, lb) == DTX_OK);
        CHECKF(most == LONG, "%s: the observed prefill's largest product took %lld rows, not all %d",
               dtx_wquant_name(schemes[si]), (long long)most, LONG);
        CHECKF(memcmp(la, lb, sizeof la) == 0, "%s: in blocks %.3g from all rows at once",
               dtx_wquant_name(schemes[si]), max_rel(la, lb, VOCAB));
        dtx_kvcache_set_hooks(b, NULL);
        REQUIRE(dtx_model_decode(q, a, tok[LONG], la) == DTX_OK);
        REQUIRE(dtx_model_decode(q, b, tok[LONG], lb) == DTX_OK);
        CHECKF(memcmp(la, lb, sizeof la) == 0, "%s: the step after the prefill differs by %.3g",
               dtx_wquant_name(schemes[si]), max_rel(la, lb, VOCAB));
        dtx_kvcache_free(a), dtx_kvcache_free(b);
        free(in);
        dtx_model_free(q);
    }
}

/* fp16 activations (w8a16 and w4a16): every path rounds each linear input to
 * fp16 instead of bf16: the full forward matches the dequantised model fed
 * fp16-rounded inputs more closely than the bf16 ones would allow, decoding
 * matches the forward, and the logits differ from the bf16 model's. */
TEST(model_wquant_fp16_activations) {
    static const dtx_wquant schemes[] = {DTX_WQ_W8A16, DTX_WQ_W4A16};
    int32_t tok[T];
    tokens_of(tok, T, 6);
    for (int si = 0; si < 2; si++) {
        dtx_config c = qconfig(DTX_ARCH_DIFF, 1);
        dtx_model *h = NULL, *b = NULL, *ref = NULL;
        REQUIRE(dtx_model_init(&h, &c, 43) == DTX_OK);
        REQUIRE(dtx_model_init(&b, &c, 43) == DTX_OK);
        REQUIRE(dtx_model_init(&ref, &c, 43) == DTX_OK);
        REQUIRE(dtx_model_quantize_weights(h, schemes[si], NULL, NULL, NULL) == DTX_OK);
        REQUIRE(dtx_model_quantize_weights(b, schemes[si], NULL, NULL, NULL) == DTX_OK);
        h->act_fp16 = 1;
        CHECK(dtx_model_act_fp16(h) == 1 && dtx_model_act_fp16(b) == 0);
        for (int i = 0; i < h->n_tensors; i++) {
            const dtx_qweight *w = &h->qw[i];
            float *dst = ref->params + ref->tensors[i].offset;
            if (w->bits == 8) dtx_q8_dequantize(dst, w->q, w->scale, w->N, w->K);
            else if (w->bits == 4) dtx_q4_dequantize(dst, w->q, w->scale, w->N, w->K);
        }
        float *lh = malloc(sizeof(float) * T * VOCAB), *lb = malloc(sizeof(float) * T * VOCAB);
        float *lr = malloc(sizeof(float) * T * VOCAB), *ld = malloc(sizeof(float) * VOCAB);
        REQUIRE(dtx_model_forward(h, tok, NULL, 1, T, lh, NULL) == DTX_OK);
        REQUIRE(dtx_model_forward(b, tok, NULL, 1, T, lb, NULL) == DTX_OK);
        REQUIRE(dtx_model_forward(ref, tok, NULL, 1, T, lr, NULL) == DTX_OK);
        /* fp16 keeps 11 significant bits to bf16's 8: about 8x closer to the unrounded inputs */
        double dh = max_rel(lh, lr, (size_t)(T * VOCAB)), db = max_rel(lb, lr, (size_t)(T * VOCAB));
        CHECKF(dh > 0 && dh < db / 3, "%s: fp16 %.3g vs bf16 %.3g from the dequantised fp32 model",
               dtx_wquant_name(schemes[si]), dh, db);
        dtx_kvcache *kc = NULL;
        REQUIRE(dtx_kvcache_init(&kc, h, T) == DTX_OK);
        double dd = 0;
        for (int64_t i = 0; i < T; i++) {
            REQUIRE(dtx_model_decode(h, kc, tok[i], ld) == DTX_OK);
            dd = fmax(dd, max_rel(ld, lh + i * VOCAB, VOCAB));
        }
        CHECKF(dd < 2e-3, "%s fp16: decode vs forward %.3g", dtx_wquant_name(schemes[si]), dd);
        dtx_kvcache_free(kc);
        free(lh), free(lb), free(lr), free(ld);
        dtx_model_free(h), dtx_model_free(b), dtx_model_free(ref);
    }
}

/* W8A8 with every input scale and q/k scale 0: every input stays bf16, so the
 * model computes exactly what the W8A16 model of the same weights does, in
 * the full forward and in decoding. */
TEST(model_wquant_w8a8_zero_scales_are_w8a16) {
    int32_t tok[T];
    tokens_of(tok, T, 8);
    for (int tie = 0; tie < 2; tie++) {
        dtx_config c = qconfig(DTX_ARCH_DIFF, tie);
        dtx_model *a = NULL, *b = NULL;
        REQUIRE(dtx_model_init(&a, &c, 44) == DTX_OK);
        REQUIRE(dtx_model_init(&b, &c, 44) == DTX_OK);
        float *in = calloc((size_t)a->n_tensors, sizeof(float)), qk[8] = {0};
        REQUIRE(dtx_model_quantize_weights(a, DTX_WQ_W8A8, NULL, in, qk) == DTX_OK);
        REQUIRE(dtx_model_quantize_weights(b, DTX_WQ_W8A16, NULL, NULL, NULL) == DTX_OK);
        float *la = malloc(sizeof(float) * T * VOCAB), *lb = malloc(sizeof(float) * T * VOCAB);
        float *da = malloc(sizeof(float) * VOCAB), *db = malloc(sizeof(float) * VOCAB);
        REQUIRE(dtx_model_forward(a, tok, NULL, 1, T, la, NULL) == DTX_OK);
        REQUIRE(dtx_model_forward(b, tok, NULL, 1, T, lb, NULL) == DTX_OK);
        CHECKF(memcmp(la, lb, sizeof(float) * T * VOCAB) == 0, "tie %d: forward differs", tie);
        dtx_kvcache *ka = NULL, *kb = NULL;
        REQUIRE(dtx_kvcache_init(&ka, a, T) == DTX_OK && dtx_kvcache_init(&kb, b, T) == DTX_OK);
        int same = 1;
        for (int64_t i = 0; i < T; i++) {
            REQUIRE(dtx_model_decode(a, ka, tok[i], da) == DTX_OK && dtx_model_decode(b, kb, tok[i], db) == DTX_OK);
            same &= memcmp(da, db, sizeof(float) * VOCAB) == 0;
        }
        CHECKF(same, "tie %d: decode differs", tie);
        qk[1] = -1; /* a negative scale is refused */
        dtx_model *n = NULL;
        REQUIRE(dtx_model_init(&n, &c, 44) == DTX_OK);
        CHECK(dtx_model_quantize_weights(n, DTX_WQ_W8A8, NULL, in, qk) == DTX_ERR_ARG && strstr(dtx_last_error(), "q/k scale 1"));
        dtx_kvcache_free(ka), dtx_kvcache_free(kb);
        free(in), free(la), free(lb), free(da), free(db);
        dtx_model_free(a), dtx_model_free(b), dtx_model_free(n);
    }
}

TEST(model_wquant_refuses_w8a8_without_scales_and_unknown_schemes) {
    dtx_config c = qconfig(DTX_ARCH_DIFF, 1);
    dtx_model *m = NULL;
    REQUIRE(dtx_model_init(&m, &c, 3) == DTX_OK);
    CHECK(dtx_model_quantize_weights(m, DTX_WQ_W8A8, NULL, NULL, NULL) == DTX_ERR_ARG);
    float *in = calloc((size_t)m->n_tensors, sizeof(float)), qk[4] = {1, 1, 1, 1};
    for (int i = 0; i < m->n_tensors; i++) in[i] = m->tensors[i].ndim == 2 ? NAN : 0; /* (0 keeps an input 16-bit) */
    CHECK(dtx_model_quantize_weights(m, DTX_WQ_W8A8, NULL, in, qk) == DTX_ERR_ARG);
    CHECK(strstr(dtx_last_error(), "input scale of") != NULL);
    CHECK(dtx_model_quantize_weights(m, (dtx_wquant)7, NULL, NULL, NULL) == DTX_ERR_ARG);
    CHECK(dtx_model_wquant(m) == DTX_WQ_NONE);
    dtx_wquant w;
    CHECK(dtx_wquant_parse("w4a16", &w) && w == DTX_WQ_W4A16);
    CHECK(!dtx_wquant_parse("w4a8", &w) && !dtx_wquant_parse("none", &w));
    free(in);
    dtx_model_free(m);
}

/* ---- files: every scheme round-trips; a malformed quantised file is refused naming the tensor or key */

#include "io/safetensors.h"

/* Rewrites src into dst with tensor `drop` left out (NULL: none), tensor `retype` declared as dtype `as`
 * (its bytes reinterpreted: sizes must agree), the byte at `poke` of tensor `pt` set to `val` and
 * metadata `key` set to `value` (NULL: unchanged). Returns 0 on success. */
static int rewrite(const char *src, const char *dst, const char *drop, const char *retype, dtx_st_dtype as,
                   const char *pt, size_t poke, int val, const char *key, const char *value) {
    dtx_st_file f;
    if (dtx_st_open(&f, src)) return -1;
    dtx_st_out *o = calloc((size_t)f.n_tensors, sizeof *o);
    uint8_t **copies = calloc((size_t)f.n_tensors, sizeof *copies);
    const char **keys = calloc((size_t)f.n_meta + 1, sizeof *keys), **vals = calloc((size_t)f.n_meta + 1, sizeof *vals);
    int n = 0, nm = 0, found = 0;
    for (int i = 0; i < f.n_tensors; i++) {
        const dtx_st_tensor *t = &f.tensors[i];
        if (drop && !strcmp(t->name, drop)) continue;
        copies[n] = malloc(t->nbytes + 1);
        memcpy(copies[n], t->data, t->nbytes);
        if (pt && !strcmp(t->name, pt) && poke < t->nbytes) copies[n][poke] = (uint8_t)val;
        o[n] = (dtx_st_out){.name = t->name, .ndim = t->ndim, .raw = copies[n], .raw_dtype = t->dtype};
        for (int d = 0; d < t->ndim; d++) o[n].shape[d] = t->shape[d];
        if (retype && !strcmp(t->name, retype)) o[n].raw_dtype = as;
        if (o[n].raw_dtype == DTX_ST_BF16 || o[n].raw_dtype == DTX_ST_F16) o[n].raw_dtype = DTX_ST_F32; /* not used here */
        n++;
    }
    for (int i = 0; i < f.n_meta; i++) {
        keys[nm] = f.meta_keys[i], vals[nm] = f.meta_values[i];
        if (key && !strcmp(keys[nm], key)) vals[nm] = value, found = 1;
        nm++;
    }
    if (key && !found) keys[nm] = key, vals[nm] = value, nm++;
    int rc = dtx_st_write(dst, o, n, keys, vals, nm, 0) == DTX_OK ? 0 : -1;
    for (int i = 0; i < n; i++) free(copies[i]);
    free(copies), free(o), free(keys), free(vals);
    dtx_st_close(&f);
    return rc;
}

/* Loading path is refused with a message holding a and b. */
static int refused(const char *path, const char *a, const char *b) {
    dtx_model *m = NULL;
    dtx_status st = dtx_model_load(&m, path);
    dtx_model_free(m);
    const char *e = dtx_last_error();
    int ok = st == DTX_ERR_FORMAT && strstr(e, a) && strstr(e, b) && !strchr(e, '\n');
    if (!ok) fprintf(stderr, "    %s: status %d, message: %s\n", path, (int)st, e);
    return ok;
}

TEST(model_wquant_files_round_trip) {
    static const dtx_wquant schemes[] = {DTX_WQ_W8A16, DTX_WQ_W8A8, DTX_WQ_W4A16};
    int32_t tok[T];
    tokens_of(tok, T, 9);
    for (int si = 0; si < 3; si++)
        for (int tie = 0; tie < 2; tie++) {
            dtx_config c = qconfig(DTX_ARCH_DIFF, tie);
            dtx_model *q = NULL, *back = NULL;
            REQUIRE(dtx_model_init(&q, &c, 77) == DTX_OK);
            float *in = calloc((size_t)q->n_tensors, sizeof(float)), qk[8];
            test_scales(q, in, qk);
            REQUIRE(dtx_model_quantize_weights(q, schemes[si], NULL, in, qk) == DTX_OK);
            q->act_fp16 = schemes[si] != DTX_WQ_W8A8 && tie; /* fp16 activations kept too */
            const char *path = test_path("q.safetensors");
            REQUIRE(dtx_model_save(q, path, 0) == DTX_OK);
            REQUIREF(dtx_model_load(&back, path) == DTX_OK, "%s", dtx_last_error());
            CHECK(dtx_model_wquant(back) == schemes[si]);
            CHECK(dtx_model_act_fp16(back) == dtx_model_act_fp16(q));
            CHECK(back->qmem_bytes == q->qmem_bytes && memcmp(back->qmem, q->qmem, q->qmem_bytes) == 0);
            for (int i = 0; i < q->n_tensors; i++) CHECK(back->qw[i].in_scale == q->qw[i].in_scale);
            if (schemes[si] == DTX_WQ_W8A8) CHECK(memcmp(back->qk_scale, q->qk_scale, sizeof(float) * 4) == 0);
            float *a = malloc(sizeof(float) * T * VOCAB), *b = malloc(sizeof(float) * T * VOCAB);
            REQUIRE(dtx_model_forward(q, tok, NULL, 1, T, a, NULL) == DTX_OK);
            REQUIRE(dtx_model_forward(back, tok, NULL, 1, T, b, NULL) == DTX_OK);
            CHECK(memcmp(a, b, sizeof(float) * T * VOCAB) == 0);
            free(a), free(b), free(in);
            dtx_model_free(q), dtx_model_free(back);
        }
}

TEST(model_wquant_malformed_files_are_refused) {
    dtx_config c = qconfig(DTX_ARCH_DIFF, 1);
    dtx_model *q = NULL, *plain = NULL;
    REQUIRE(dtx_model_init(&q, &c, 78) == DTX_OK);
    REQUIRE(dtx_model_init(&plain, &c, 78) == DTX_OK);
    float *in = calloc((size_t)q->n_tensors, sizeof(float)), qk[4];
    test_scales(q, in, qk);
    REQUIRE(dtx_model_quantize_weights(q, DTX_WQ_W8A8, NULL, in, qk) == DTX_OK);
    char good[512], bad[512], good4[512], fp[512];
    snprintf(good, sizeof good, "%s", test_path("good8.safetensors"));
    snprintf(bad, sizeof bad, "%s", test_path("bad.safetensors"));
    snprintf(good4, sizeof good4, "%s", test_path("good4.safetensors"));
    snprintf(fp, sizeof fp, "%s", test_path("fp32.safetensors"));
    REQUIRE(dtx_model_save(q, good, 0) == DTX_OK);
    REQUIRE(dtx_model_save(plain, fp, 0) == DTX_OK);
    const char *w = "layers.1.feed_forward.w2.weight";
    /* an unknown scheme, and integers where a float model needs floats */
    REQUIRE(rewrite(good, bad, NULL, NULL, 0, NULL, 0, 0, "quant_scheme", "w2a2") == 0);
    CHECK(refused(bad, "'quant_scheme' = 'w2a2'", "w8a16, w8a8 or w4a16"));
    REQUIRE(rewrite(good, bad, NULL, NULL, 0, NULL, 0, 0, "quant_scheme", "w8a16") == 0); /* w8a8's extra tensors */
    CHECK(refused(bad, "unexpected tensor", ".input_scale"));
    REQUIRE(rewrite(fp, bad, NULL, "norm.weight", DTX_ST_I8, NULL, 0, 0, NULL, NULL) == 0);
    CHECK(refused(bad, "", "")); /* I8 bytes of a F32 tensor: the size no longer matches its shape */
    /* each companion tensor missing */
    char name[128];
    snprintf(name, sizeof name, "%s.scale", w);
    REQUIRE(rewrite(good, bad, name, NULL, 0, NULL, 0, 0, NULL, NULL) == 0);
    CHECK(refused(bad, "missing tensor", name));
    snprintf(name, sizeof name, "%s.input_scale", w);
    REQUIRE(rewrite(good, bad, name, NULL, 0, NULL, 0, 0, NULL, NULL) == 0);
    CHECK(refused(bad, "missing tensor", name));
    REQUIRE(rewrite(good, bad, "layers.0.attention.qk_scale", NULL, 0, NULL, 0, 0, NULL, NULL) == 0);
    CHECK(refused(bad, "missing tensor", "'layers.0.attention.qk_scale'"));
    /* codes of the wrong dtype, a negative scale, a zero input scale */
    REQUIRE(rewrite(good, bad, NULL, w, DTX_ST_U8, NULL, 0, 0, NULL, NULL) == 0);
    CHECK(refused(bad, w, "is U8, expected I8"));
    snprintf(name, sizeof name, "%s.scale", w);
    REQUIRE(rewrite(good, bad, NULL, NULL, 0, name, 3, 0xbf, NULL, NULL) == 0); /* sign bit of element 0 */
    CHECK(refused(bad, name, "finite and at least 0"));
    snprintf(name, sizeof name, "%s.input_scale", w);
    REQUIRE(rewrite(good, bad, NULL, NULL, 0, name, 3, 0xbf, NULL, NULL) == 0); /* negative */
    CHECK(refused(bad, name, "finite and at least 0"));
    REQUIRE(rewrite(good, bad, NULL, NULL, 0, name, 3, 0x7f, NULL, NULL) == 0);
    REQUIRE(rewrite(bad, bad, NULL, NULL, 0, name, 2, 0x80, NULL, NULL) == 0); /* bytes 0x7f80.... : infinite */
    REQUIRE(rewrite(bad, bad, NULL, NULL, 0, name, 1, 0x00, NULL, NULL) == 0);
    REQUIRE(rewrite(bad, bad, NULL, NULL, 0, name, 0, 0x00, NULL, NULL) == 0);
    CHECK(refused(bad, name, "finite and at least 0"));
    /* a zero input scale is an input kept 16-bit: it loads */
    REQUIRE(rewrite(good, bad, NULL, NULL, 0, name, 3, 0x00, NULL, NULL) == 0);
    REQUIRE(rewrite(bad, bad, NULL, NULL, 0, name, 2, 0x00, NULL, NULL) == 0);
    REQUIRE(rewrite(bad, bad, NULL, NULL, 0, name, 1, 0x00, NULL, NULL) == 0);
    REQUIRE(rewrite(bad, bad, NULL, NULL, 0, name, 0, 0x00, NULL, NULL) == 0);
    dtx_model *zero = NULL;
    REQUIREF(dtx_model_load(&zero, bad) == DTX_OK, "%s", dtx_last_error());
    dtx_model_free(zero);
    /* the a16 activations' key: an unknown value, fp16 on w8a8 or on a float model */
    REQUIRE(rewrite(good, bad, NULL, NULL, 0, NULL, 0, 0, "quant_act16", "fp8") == 0);
    CHECK(refused(bad, "'quant_act16' = 'fp8'", "bf16 or fp16"));
    REQUIRE(rewrite(good, bad, NULL, NULL, 0, NULL, 0, 0, "quant_act16", "fp16") == 0);
    CHECK(refused(bad, "'quant_act16' = 'fp16'", "it is 'w8a8'"));
    REQUIRE(rewrite(fp, bad, NULL, NULL, 0, NULL, 0, 0, "quant_act16", "fp16") == 0);
    CHECK(refused(bad, "'quant_act16' = 'fp16'", "needs quant_scheme w8a16 or w4a16"));
    CHECK(dtx_model_set_meta(q, "quant_act16", "fp16") == DTX_ERR_ARG);
    /* 4-bit: a code 0 nibble */
    dtx_model *q4 = NULL;
    REQUIRE(dtx_model_init(&q4, &c, 79) == DTX_OK);
    REQUIRE(dtx_model_quantize_weights(q4, DTX_WQ_W4A16, NULL, NULL, NULL) == DTX_OK);
    REQUIRE(dtx_model_save(q4, good4, 0) == DTX_OK);
    dtx_model *ok4 = NULL;
    REQUIREF(dtx_model_load(&ok4, good4) == DTX_OK, "%s", dtx_last_error()); /* the good one loads */
    dtx_model_free(ok4);
    REQUIRE(rewrite(good4, bad, NULL, NULL, 0, w, 5, 0x80, NULL, NULL) == 0);
    CHECK(refused(bad, w, "4-bit code 0"));
    free(in);
    dtx_model_free(q), dtx_model_free(q4), dtx_model_free(plain);
}
