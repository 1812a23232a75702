/* Cached decoding (src/model/generate.c, src/kernels/attention_decode.c) and
 * the sampler (src/model/sample.c).
 *
 * The cache is checked against recomputation: after a prefill and after each
 * decode step the logits equal the last row of dtx_model_forward over the
 * whole sequence so far, for both architectures, MHA and GQA, tied and
 * untied (max-element error relative to max |logit|). A prefill equals the
 * same tokens decoded one at a time, and a prefill in chunks. The sampler's
 * truncation rules are checked on small hand-made distributions. */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/team.h"
#include "model/model.h"
#include "test.h"

enum { VOCAB = 61, MAXLEN = 32 };

/* Table 6 variant of the models below: 0 the default, 1 the other subln
 * (DIFF without, the Transformer with), 2 a constant lambda_init of 0.5
 * (DIFF; the default for the Transformer); DIFF2: 1 λ without the sigmoid,
 * 2 no λ. */
static int test_variant;

static dtx_config small_config(dtx_arch arch, int gqa, int tie) {
    dtx_config c = dtx_config_default();
    c.arch = arch;
    c.dim = 64;
    c.n_layers = 3;
    c.n_heads = arch == DTX_ARCH_DIFF ? 4 : 8; /* d = 8 for all three */
    c.n_kv_heads = gqa ? c.n_heads / 4 : c.n_heads;
    c.vocab_size = VOCAB;
    c.ffn_dim = 96;
    c.max_seq_len = MAXLEN;
    c.tie_embeddings = tie;
    if (test_variant == 4 && arch == DTX_ARCH_DIFF) { /* a converted Transformer, half phased in */
        c.head_dim = 16, c.transformer_mix = 0.5;
        return c;
    }
    if (test_variant == 3) { /* Hugging Face imports: a head width of its own, Llama 3.1's RoPE scaling */
        c.head_dim = 12;
        c.rope_factor = 4, c.rope_low_freq = 1, c.rope_high_freq = 4, c.rope_orig_max_pos = 8;
        return c;
    }
    if (arch == DTX_ARCH_DIFF2) {
        if (test_variant) c.v2_lambda = test_variant == 1 ? DTX_V2_LAMBDA_LINEAR : DTX_V2_LAMBDA_NONE;
        return c;
    }
    if (test_variant == 1) c.subln = arch == DTX_ARCH_DIFF ? DTX_SUBLN_NONE : DTX_SUBLN_RMS;
    if (test_variant == 2 && arch == DTX_ARCH_DIFF) c.lambda_init_fixed = 1, c.lambda_init_value = 0.5;
    return c;
}

/* A model with its 1-D tensors (norm weights, subln, λ vectors) randomised
 * too, so that a mixed-up weight cannot hide behind a weight of ones. */
static dtx_model *make_model(dtx_arch arch, int gqa, int tie, uint64_t seed) {
    dtx_config c = small_config(arch, gqa, tie);
    dtx_model *m = NULL;
    if (dtx_model_init(&m, &c, seed) != DTX_OK) return NULL;
    dtx_rng r;
    dtx_rng_seed(&r, seed + 100);
    real *p = dtx_model_params(m);
    for (int i = 0; i < dtx_model_num_tensors(m); i++) {
        const dtx_tensor_info *t = dtx_model_tensor(m, i);
        if (t->ndim != 1) continue;
        for (size_t j = 0; j < t->numel; j++) p[t->offset + j] *= (real)(1 + 0.3 * dtx_rng_normal(&r));
    }
    return m;
}

static void random_tokens(int32_t *t, int64_t n, uint64_t seed) {
    dtx_rng r;
    dtx_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) t[i] = (int32_t)(dtx_rng_next(&r) % VOCAB);
}

/* Logits of the last of tokens [n], recomputed by the full forward. */
static int full_last(dtx_model *m, const int32_t *tokens, int64_t n, real *out) {
    real *all = malloc((size_t)(n * VOCAB) * sizeof *all);
    if (!all) return -1;
    dtx_status st = dtx_model_forward(m, tokens, NULL, 1, n, all, NULL);
    if (!st) memcpy(out, all + (n - 1) * VOCAB, VOCAB * sizeof *out);
    free(all);
    return st ? -1 : 0;
}

static const char *combo_name(dtx_arch arch, int gqa, int tie) {
    static char buf[64];
    snprintf(buf, sizeof buf, "%s %s %s", dtx_arch_name(arch), gqa ? "gqa" : "mha",
             tie ? "tied" : "untied");
    return buf;
}

/* Prefill n0 random tokens, then decode until the cache is full, comparing
 * the logits after every step with the full forward: over the sequence so
 * far (per_prefix), or the matching row of one forward over the whole
 * sequence (the same values by causality; far fewer forwards). Returns the
 * worst relative error. */
static double check_against_forward(dtx_arch arch, int gqa, int tie, dtx_precision prec, int64_t n0, int per_prefix,
                                    double tol) {
    dtx_model *m = make_model(arch, gqa, tie, 11 + (uint64_t)(2 * gqa + tie));
    double worst = 0;
    dtx_kvcache *c = NULL;
    real *all = NULL;
    if (!m) {
        CHECKF(0, "model init: %s", dtx_last_error());
        return 1;
    }
    dtx_model_set_precision(m, prec);
    /* The cache's attention is fp32 in either precision (difftx.h); in bf16
     * the flash forward's is not, so the forward takes the plain (fp32)
     * attention here to round exactly the operands the cache rounds. */
    if (prec == DTX_PREC_BF16) dtx_model_set_attention(m, DTX_ATTN_PLAIN);
    int32_t seq[MAXLEN];
    random_tokens(seq, MAXLEN, 5);
    real cached[VOCAB], full[VOCAB];
    all = malloc((size_t)MAXLEN * VOCAB * sizeof *all);
    if (!all || dtx_kvcache_init(&c, m, 0) != DTX_OK) {
        CHECKF(0, "cache init: %s", dtx_last_error());
        goto done;
    }
    if (!per_prefix && dtx_model_forward(m, seq, NULL, 1, MAXLEN, all, NULL) != DTX_OK) {
        CHECKF(0, "forward: %s", dtx_last_error());
        goto done;
    }
    CHECK(dtx_kvcache_max_len(c) == MAXLEN && dtx_kvcache_len(c) == 0);
    for (int64_t n = n0; n <= MAXLEN; n++) {
        dtx_status st = n == n0 ? dtx_model_prefill(m, c, seq, n0, cached) : dtx_model_decode(m, c, seq[n - 1], cached);
        if (st != DTX_OK) {
            CHECKF(0, "%s: step %lld: %s", combo_name(arch, gqa, tie), (long long)n, dtx_last_error());
            goto done;
        }
        if (!per_prefix) memcpy(full, all + (n - 1) * VOCAB, sizeof full);
        else if (full_last(m, seq, n, full) != 0) {
            CHECKF(0, "%s: forward: %s", combo_name(arch, gqa, tie), dtx_last_error());
            goto done;
        }
        double e = rel_err_f(cached, full, VOCAB);
        CHECKF(e <= tol, "%s: step %lld: logits differ by %.3g relative", combo_name(arch, gqa, tie), (long long)n, e);
        if (e > worst) worst = e;
    }
    CHECK(dtx_kvcache_len(c) == MAXLEN);
    /* Full: one more token is refused with a message, and nothing changes. */
    CHECK(dtx_model_decode(m, c, 1, cached) == DTX_ERR_ARG);
    CHECKF(strstr(dtx_last_error(), "KV cache full"), "%s", dtx_last_error());
    CHECK(dtx_kvcache_len(c) == MAXLEN);
    if (prec == DTX_PREC_BF16) { /* and bf16 did take effect: fp32 differs */
        dtx_model_set_precision(m, DTX_PREC_FP32);
        CHECK(full_last(m, seq, MAXLEN, full) == 0);
        CHECKF(rel_err_f(cached, full, VOCAB) > 1e-4, "bf16 logits equal fp32's (%.3g)",
               rel_err_f(cached, full, VOCAB));
    }
done:
    free(all);
    dtx_kvcache_free(c);
    dtx_model_free(m);
    return worst;
}

TEST(generate_cached_logits_match_full_forward) {
    double worst_all = 0;
    for (int arch = 0; arch < 3; arch++)
        for (int gqa = 0; gqa < 2; gqa++)
            for (int tie = 0; tie < 2; tie++) {
                /* n0 = 9: the flash prefill, then each step against a forward over
                 * the sequence so far; n0 = 1: a one-row prefill (the decode kernel)
                 * against the rows of one forward over the whole sequence. */
                double e1 = check_against_forward((dtx_arch)arch, gqa, tie, DTX_PREC_FP32, 9, 1, 1e-5);
                double e2 = check_against_forward((dtx_arch)arch, gqa, tie, DTX_PREC_FP32, 1, 0, 1e-5);
                if (e1 > worst_all) worst_all = e1;
                if (e2 > worst_all) worst_all = e2;
            }
    printf("    worst cached-vs-full logit error (fp32): %.2e\n", worst_all);
}

/* The same for Table 6's variants: the cache's decode kernel and prefill
 * apply each variant's epilogue as the full forward does. */
TEST(generate_cached_logits_match_full_forward_variants) {
    for (test_variant = 1; test_variant <= 4; test_variant++)
        for (int arch = 0; arch < 3; arch++) {
            if (test_variant == 2 && arch == DTX_ARCH_TRANSFORMER) continue;
            if (test_variant == 4 && arch != DTX_ARCH_DIFF) continue;
            for (int gqa = 0; gqa < 2; gqa++) {
                check_against_forward((dtx_arch)arch, gqa, gqa, DTX_PREC_FP32, 9, 1, 1e-5);
                check_against_forward((dtx_arch)arch, gqa, gqa, DTX_PREC_FP32, 1, 0, 1e-5);
            }
        }
    test_variant = 0;
}

/* bf16 products: the cache and the full forward (plain attention, see
 * check_against_forward) round the same operands (weights, and activations
 * that agree to fp32 rounding, which the rounding to bf16 mostly absorbs),
 * so they agree far more closely than bf16's 4e-3. */
TEST(generate_cached_logits_match_full_forward_bf16) {
    double worst_all = 0;
    for (int arch = 0; arch < 3; arch++) {
        double e = check_against_forward((dtx_arch)arch, 1, 0, DTX_PREC_BF16, 9, 0, 1e-3);
        if (e > worst_all) worst_all = e;
    }
    printf("    worst cached-vs-full logit error (bf16): %.2e\n", worst_all);
}

/* A prefill of n tokens leaves the same cache as n single decodes from an
 * empty cache, and as a prefill in two chunks (the second attends over the
 * first): the logits of the step after agree. With a bf16 cache too, to
 * 2e-3: the products of a prefill, of its chunks and of single decodes
 * differ in their last bits, which flips a few keys' bf16 rounding; and a
 * prefill's attention over its own keys reads them rounded as the cache
 * keeps them (the keys every layer's attention read, shown to a hook, are
 * all bf16 values). */
static void count_unrounded(void *ctx, int64_t l, const real *q, const real *k, int64_t n) {
    (void)l, (void)q;
    int64_t *bad = ctx; /* bad[0]: the keys' values seen, bad[1]: those not bf16 values */
    for (int64_t i = 0; i < n * bad[2]; i++) bad[0]++, bad[1] += (real)dtx_bf16_round_f32((float)k[i]) != k[i];
}

TEST(generate_prefill_equals_single_decodes) {
    for (int kvt = 0; kvt < 2; kvt++)
    for (int arch = 0; arch < 3; arch++)
        for (int gqa = 0; gqa < 2; gqa++) {
            dtx_model *m = make_model((dtx_arch)arch, gqa, 0, 3);
            REQUIRE(m);
            enum { N = 17 };
            int32_t seq[N + 1];
            random_tokens(seq, N + 1, 9);
            dtx_kvcache *a = NULL, *b = NULL, *c = NULL;
            const dtx_kv_type kt = kvt ? DTX_KV_BF16 : DTX_KV_FP32;
            REQUIRE(dtx_kvcache_init_type(&a, m, N + 1, kt) == DTX_OK);
            REQUIRE(dtx_kvcache_init_type(&b, m, N + 1, kt) == DTX_OK);
            REQUIRE(dtx_kvcache_init_type(&c, m, 0, kt) == DTX_OK);
            CHECK(dtx_kvcache_type(a) == kt);
            real la[VOCAB], lb[VOCAB], lc[VOCAB];
            int64_t seen[3] = {0, 0, m->kv_dim};
            const dtx_prefill_hooks hk = {.ctx = seen, .layer_qk = count_unrounded};
            if (kvt) dtx_kvcache_set_hooks(a, &hk);
            REQUIRE(dtx_model_prefill(m, a, seq, N, la) == DTX_OK);
            dtx_kvcache_set_hooks(a, NULL);
            CHECKF(!kvt || (seen[0] == 3 * N * seen[2] && seen[1] == 0),
                   "%s: a bf16 cache's prefill attended over %lld of %lld keys' values unrounded",
                   combo_name((dtx_arch)arch, gqa, 0), (long long)seen[1], (long long)seen[0]);
            for (int i = 0; i < N; i++) REQUIRE(dtx_model_decode(m, b, seq[i], lb) == DTX_OK);
            REQUIRE(dtx_model_prefill(m, c, seq, 6, NULL) == DTX_OK);
            REQUIRE(dtx_model_prefill(m, c, seq + 6, N - 6, lc) == DTX_OK);
            CHECK(dtx_kvcache_len(a) == N && dtx_kvcache_len(b) == N && dtx_kvcache_len(c) == N);
            const double tol1 = kvt ? 2e-3 : 1e-5;
            double e1 = rel_err_f(lb, la, VOCAB), e2 = rel_err_f(lc, la, VOCAB);
            CHECKF(e1 <= tol1 && e2 <= tol1, "%s (%s cache): after prefill: decodes %.3g, chunks %.3g",
                   combo_name((dtx_arch)arch, gqa, 0), dtx_kv_type_name(kt), e1, e2);
            REQUIRE(dtx_model_decode(m, a, seq[N], la) == DTX_OK);
            REQUIRE(dtx_model_decode(m, b, seq[N], lb) == DTX_OK);
            REQUIRE(dtx_model_decode(m, c, seq[N], lc) == DTX_OK);
            e1 = rel_err_f(lb, la, VOCAB), e2 = rel_err_f(lc, la, VOCAB);
            CHECKF(e1 <= tol1 && e2 <= tol1, "%s (%s cache): next step: decodes %.3g, chunks %.3g",
                   combo_name((dtx_arch)arch, gqa, 0), dtx_kv_type_name(kt), e1, e2);
            /* reset starts a new sequence in the same memory */
            dtx_kvcache_reset(a);
            CHECK(dtx_kvcache_len(a) == 0);
            REQUIRE(dtx_model_prefill(m, a, seq, N, la) == DTX_OK);
            REQUIRE(dtx_model_decode(m, a, seq[N], la) == DTX_OK);
            CHECK(rel_err_f(lb, la, VOCAB) <= tol1);
            dtx_kvcache_free(a);
            dtx_kvcache_free(b);
            dtx_kvcache_free(c);
            dtx_model_free(m);
        }
}

/* A decode step marks its thread (common/team.h: no OpenMP region inside
 * it), a prefill of several tokens does not, and both give the mark back:
 * the layers show it to a hook; a batched step leaves it as it found it. */
static void note_step_mark(void *ctx, int64_t l, const real *q, const real *k, int64_t n) {
    (void)l, (void)q, (void)k;
    int *marks = ctx; /* [0]: layers seen marked, [1]: unmarked */
    marks[dtx_team_in_step() ? 0 : 1] += (int)n > 0;
}

TEST(generate_decode_step_marks_its_thread) {
    dtx_model *m = make_model(DTX_ARCH_DIFF, 1, 0, 3);
    REQUIRE(m);
    int32_t seq[8];
    random_tokens(seq, 8, 5);
    dtx_kvcache *a = NULL, *b = NULL;
    REQUIRE(dtx_kvcache_init(&a, m, 16) == DTX_OK && dtx_kvcache_init(&b, m, 16) == DTX_OK);
    int marks[2] = {0, 0};
    const dtx_prefill_hooks hk = {.ctx = marks, .layer_qk = note_step_mark};
    dtx_kvcache_set_hooks(a, &hk);
    real lg[2 * VOCAB];
    REQUIRE(dtx_model_prefill(m, a, seq, 6, lg) == DTX_OK);
    CHECKF(marks[0] == 0 && marks[1] == (int)m->cfg.n_layers, "prefill: %d layers marked, %d not", marks[0], marks[1]);
    CHECK(!dtx_team_in_step());
    marks[0] = marks[1] = 0;
    REQUIRE(dtx_model_decode(m, a, seq[6], lg) == DTX_OK);
    CHECKF(marks[0] == (int)m->cfg.n_layers && marks[1] == 0, "decode: %d layers marked, %d not", marks[0], marks[1]);
    CHECK(!dtx_team_in_step());
    dtx_kvcache_set_hooks(a, NULL);
    REQUIRE(dtx_model_prefill(m, b, seq, 3, NULL) == DTX_OK);
    dtx_kvcache *both[2] = {a, b};
    const int32_t next[2] = {seq[7], seq[3]};
    REQUIRE(dtx_model_decode_batch(m, both, next, 2, lg) == DTX_OK);
    CHECK(!dtx_team_in_step());
    CHECK(dtx_team_step(1) == 0); /* a caller's own mark survives the steps inside it */
    REQUIRE(dtx_model_decode_batch(m, both, next, 2, lg) == DTX_OK);
    REQUIRE(dtx_model_prefill(m, b, seq, 2, NULL) == DTX_OK);
    CHECK(dtx_team_in_step());
    dtx_team_step(0);
    dtx_kvcache_free(a);
    dtx_kvcache_free(b);
    dtx_model_free(m);
}

/* A bf16 cache keeps half the bytes and its logits stay within bf16's
 * rounding of the fp32 cache's (not equal to them: the rounding is there);
 * a batched step over bf16 caches gives each sequence the bits of its own
 * decode step; fp32 and bf16 caches in one batched step, a bf16 cache with
 * quantised attention logits and an unknown type are refused. */
TEST(generate_bf16_kv_cache) {
    for (int arch = 0; arch < 3; arch++) {
        dtx_model *m = make_model((dtx_arch)arch, 1, 0, 4);
        REQUIRE(m);
        enum { N = 20 };
        int32_t seq[N];
        random_tokens(seq, N, 13);
        dtx_kvcache *f = NULL, *h = NULL, *h2 = NULL, *g = NULL;
        REQUIRE(dtx_kvcache_init_type(&f, m, N, DTX_KV_FP32) == DTX_OK);
        REQUIRE(dtx_kvcache_init_type(&h, m, N, DTX_KV_BF16) == DTX_OK);
        REQUIRE(dtx_kvcache_init_type(&h2, m, N, DTX_KV_BF16) == DTX_OK);
        REQUIRE(dtx_kvcache_init_type(&g, m, N, DTX_KV_BF16) == DTX_OK);
        CHECK(dtx_kvcache_bytes(h) * sizeof(real) == dtx_kvcache_bytes(f) * sizeof(uint16_t));
        real lf[VOCAB], lh[VOCAB], lb[2 * VOCAB], one[VOCAB];
        REQUIRE(dtx_model_prefill(m, f, seq, 7, lf) == DTX_OK);
        REQUIRE(dtx_model_prefill(m, h, seq, 7, lh) == DTX_OK);
        /* h2 runs two tokens behind h, g beside h2 with single steps: a batched step of h and h2 gives h2's
         * row the bits of g's own step (their caches made alike, row by row) */
        REQUIRE(dtx_model_prefill(m, h2, seq, 5, NULL) == DTX_OK);
        REQUIRE(dtx_model_prefill(m, g, seq, 5, NULL) == DTX_OK);
        double worst = 0, least = 1;
        for (int i = 7; i < N; i++) {
            REQUIRE(dtx_model_decode(m, f, seq[i], lf) == DTX_OK);
            dtx_kvcache *both[2] = {h, h2};
            int32_t toks[2] = {seq[i], seq[i - 2]};
            REQUIRE(dtx_model_decode_batch(m, both, toks, 2, lb) == DTX_OK);
            REQUIRE(dtx_model_decode(m, g, seq[i - 2], one) == DTX_OK);
            CHECKF(!memcmp(one, lb + VOCAB, sizeof one), "%s: bf16 batched step differs from its own step at %d",
                   dtx_arch_name((dtx_arch)arch), i);
            memcpy(lh, lb, sizeof lh);
            double e = rel_err_f(lh, lf, VOCAB);
            worst = e > worst ? e : worst, least = e < least ? e : least;
        }
        CHECKF(worst <= 2e-2, "%s: bf16 cache logits differ from fp32's by %.3g relative", dtx_arch_name((dtx_arch)arch),
               worst);
#ifndef DTX_DOUBLE
        CHECKF(least > 0, "%s: bf16 cache logits equal fp32's: no rounding?", dtx_arch_name((dtx_arch)arch));
#endif
        printf("    %s: bf16 KV cache against fp32, relative logit difference %.2e .. %.2e\n",
               dtx_arch_name((dtx_arch)arch), least, worst);
        /* one fp32 and one bf16 cache in one step */
        dtx_kvcache_reset(h), dtx_kvcache_reset(f);
        dtx_kvcache *mixed[2] = {h, f};
        int32_t toks[2] = {1, 2};
        CHECK(dtx_model_decode_batch(m, mixed, toks, 2, lb) == DTX_ERR_ARG);
        CHECKF(strstr(dtx_last_error(), "KV cache is fp32"), "%s", dtx_last_error());
        dtx_kvcache_free(f);
        dtx_kvcache_free(h);
        dtx_kvcache_free(h2);
        dtx_kvcache_free(g);
        dtx_model_free(m);
    }
    dtx_model *m = make_model(DTX_ARCH_DIFF, 0, 0, 5);
    REQUIRE(m);
    dtx_kvcache *h = NULL;
    CHECK(dtx_kvcache_init_type(&h, m, 8, (dtx_kv_type)7) == DTX_ERR_ARG);
    CHECKF(strstr(dtx_last_error(), "unknown KV cache type"), "%s", dtx_last_error());
    dtx_kv_type t = DTX_KV_FP32;
    CHECK(dtx_kv_type_parse("bf16", &t) == DTX_OK && t == DTX_KV_BF16);
    CHECK(dtx_kv_type_parse("fp16", &t) == DTX_ERR_ARG);
    CHECKF(strstr(dtx_last_error(), "'fp16'"), "%s", dtx_last_error());
    REQUIRE(dtx_kvcache_init_type(&h, m, 8, DTX_KV_BF16) == DTX_OK);
    REQUIRE(dtx_model_set_attention_quant(m, 4, DTX_QUANT_TENSOR) == DTX_OK);
    int32_t tok = 1;
    CHECK(dtx_model_prefill(m, h, &tok, 1, NULL) == DTX_ERR_ARG);
    CHECKF(strstr(dtx_last_error(), "quantised attention logits"), "%s", dtx_last_error());
    dtx_kvcache_free(h);
    dtx_model_free(m);
}

TEST(generate_refuses_bad_arguments) {
    dtx_model *m = make_model(DTX_ARCH_DIFF, 0, 1, 1);
    REQUIRE(m);
    dtx_kvcache *c = NULL;
    CHECK(dtx_kvcache_init(&c, m, MAXLEN + 1) == DTX_ERR_ARG && !c);
    CHECKF(strstr(dtx_last_error(), "max_seq_len"), "%s", dtx_last_error());
    REQUIRE(dtx_kvcache_init(&c, m, 8) == DTX_OK);
    /* K and V: 2 · layers · max_len · kv_dim floats */
    CHECK(dtx_kvcache_bytes(c) == 2 * 3 * 8 * 64 * sizeof(real));
    CHECK(dtx_kvcache_scratch_bytes(c) > 0);
    int32_t seq[10];
    random_tokens(seq, 10, 1);
    real logits[VOCAB];
    CHECK(dtx_model_prefill(m, c, seq, 9, logits) == DTX_ERR_ARG);
    CHECKF(strstr(dtx_last_error(), "KV cache full") && strstr(dtx_last_error(), "9 new"), "%s", dtx_last_error());
    CHECK(dtx_model_prefill(m, c, seq, 0, logits) == DTX_ERR_ARG);
    CHECK(dtx_kvcache_len(c) == 0);
    seq[3] = VOCAB;
    CHECK(dtx_model_prefill(m, c, seq, 5, logits) == DTX_ERR_ARG);
    CHECKF(strstr(dtx_last_error(), "out of range"), "%s", dtx_last_error());
    CHECK(dtx_model_decode(m, c, -1, logits) == DTX_ERR_ARG);
    CHECK(dtx_kvcache_len(c) == 0);
    seq[3] = 1;
    CHECK(dtx_model_prefill(m, c, seq, 8, NULL) == DTX_OK);
    CHECK(dtx_model_decode(m, c, 1, logits) == DTX_ERR_ARG);
    CHECK(dtx_kvcache_len(c) == 8);
    /* a cache made for another model shape */
    dtx_model *other = make_model(DTX_ARCH_TRANSFORMER, 0, 1, 1);
    REQUIRE(other);
    dtx_kvcache_reset(c);
    CHECK(dtx_model_decode(other, c, 1, logits) == DTX_ERR_ARG);
    CHECKF(strstr(dtx_last_error(), "another shape"), "%s", dtx_last_error());
    dtx_model_free(other);
    dtx_kvcache_free(c);
    dtx_model_free(m);
    /* DIFF V2 without λ has no λ buffers: a cache made for it refuses the sigmoid form of the same shape */
    test_variant = 2;
    dtx_model *none = make_model(DTX_ARCH_DIFF2, 1, 0, 1);
    test_variant = 0;
    dtx_model *sig = make_model(DTX_ARCH_DIFF2, 1, 0, 1);
    REQUIRE(none && sig && dtx_kvcache_init(&c, none, 0) == DTX_OK);
    CHECK(dtx_model_decode(sig, c, 1, logits) == DTX_ERR_ARG && strstr(dtx_last_error(), "another shape"));
    CHECK(dtx_model_decode(none, c, 1, logits) == DTX_OK);
    dtx_kvcache_free(c);
    dtx_model_free(none), dtx_model_free(sig);
}

/* dtx_sample (now on the cache) continues greedily exactly as the argmax of
 * the full forward recomputed at every step. */
TEST(generate_dtx_sample_greedy_matches_recomputation) {
    dtx_model *m = make_model(DTX_ARCH_DIFF, 1, 0, 21);
    REQUIRE(m);
    enum { NP = 4, NN = 20 };
    int32_t prompt[NP] = {3, 1, 4, 1}, out[NP + NN], ref[NP + NN];
    REQUIRE(dtx_sample(m, prompt, NP, NN, 0, 1, out) == DTX_OK);
    memcpy(ref, prompt, sizeof prompt);
    real logits[VOCAB];
    for (int n = NP; n < NP + NN; n++) {
        REQUIRE(full_last(m, ref, n, logits) == 0);
        int best = 0;
        for (int i = 1; i < VOCAB; i++)
            if (logits[i] > logits[best]) best = i;
        ref[n] = best;
    }
    CHECK(memcmp(out, ref, sizeof out) == 0);
    /* the whole length allowed, and one more refused */
    int32_t big[MAXLEN];
    CHECK(dtx_sample(m, prompt, NP, MAXLEN - NP, 0.9, 3, big) == DTX_OK);
    CHECK(dtx_sample(m, prompt, NP, MAXLEN - NP + 1, 0.9, 3, big) == DTX_ERR_ARG);
    dtx_model_free(m);
}

/* The decode kernel on a long cache (the multi-threaded path): one query
 * row over len cached rows equals the last row of the plain (materialised)
 * attention forward over the same len rows, and gives the same bits with one
 * thread and with several; with and without the per-head norm. Over a bf16
 * cache's rows (dtx_attention_decode_bf16) it gives the bits of those rows
 * widened, at every ISA level. */
TEST(generate_attention_decode_matches_forward_last_row) {
    /* 400 rows: the heads over the threads (a layer's keys under 256 KiB); 2100, two variants: the rows
     * in chunks, the 32 chunks' cap, each a multiple of 16 rows; the last two runs with 72 DIFF heads on
     * 36 (144 query sub-heads and 72 heads' values: past the 64 one walk over the rows takes, so the rows
     * are walked again), 100 rows (the heads: fewer than two chunks' rows) and 300 (chunked: 4608-byte
     * key rows) */
    for (int run = 0; run < 12; run++) {
        const int64_t LEN = run == 10 ? 100 : run == 11 ? 300 : run < 8 ? 400 : 2100;
        const int variant = run < 8 ? run : run < 10 ? run - 8 : 3, many = run >= 10;
        int diff = variant & 1, gqa = (variant >> 1) & 1, sl = variant >> 2 ? !diff : diff;
        const int64_t hd = 16;
        dtx_attn_dims a = {.run.impl = DTX_ATTN_PLAIN, .geom.B = 1, .geom.T = LEN,
                           .geom.n_heads = many ? 72 : diff ? 4 : 8,
                           .geom.n_kv_heads = many ? 36 : gqa ? 2 : (diff ? 4 : 8), .geom.head_dim = hd,
                           .arch.diff = diff, .arch.subln = sl, .arch.lambda = 0.37, .arch.lambda_init = 0.2,
                           .arch.eps = 1e-5};
        int64_t NQ = (diff ? 2 : 1) * a.geom.n_heads, D = NQ * hd, KV = (diff ? 2 : 1) * a.geom.n_kv_heads * hd;
        real *q = malloc((size_t)(LEN * D) * sizeof(real)), *k = malloc((size_t)(LEN * KV) * sizeof(real));
        real *v = malloc((size_t)(LEN * KV) * sizeof(real)), *ref = malloc((size_t)(LEN * D) * sizeof(real));
        real *att = malloc(dtx_attention_att_size(&a) * sizeof(real));
        real *o1 = malloc((dtx_attention_o_size(&a) + 1) * sizeof(real));
        real *o2 = malloc((dtx_attention_o_size(&a) + 1) * sizeof(real));
        real *rs = malloc((dtx_attention_rstd_size(&a) + 1) * sizeof(real));
        real *scratch = malloc(dtx_attention_decode_scratch_size(&a, LEN) * sizeof(real));
        real gamma[32], out1[2304], out2[2304];
        REQUIRE(q && k && v && ref && att && o1 && o2 && rs && scratch);
        dtx_rng r;
        dtx_rng_seed(&r, 40 + (uint64_t)(2 * diff + gqa));
        for (int64_t i = 0; i < LEN * D; i++) q[i] = (real)dtx_rng_normal(&r);
        for (int64_t i = 0; i < LEN * KV; i++) k[i] = (real)dtx_rng_normal(&r), v[i] = (real)dtx_rng_normal(&r);
        for (int i = 0; i < 32; i++) gamma[i] = (real)(1 + 0.3 * dtx_rng_normal(&r));
        dtx_attn_saved sv = {.att = att, .o1 = o1, .o2 = o2, .rstd = rs};
        dtx_attention_forward(&a, ref, &sv, q, k, v, gamma);
        const real *qlast = q + (LEN - 1) * D;
        int threads = omp_get_max_threads();
        omp_set_num_threads(1);
        dtx_attention_decode(&a, out1, qlast, k, v, LEN, gamma, scratch);
        omp_set_num_threads(threads > 1 ? threads : 2);
        dtx_attention_decode(&a, out2, qlast, k, v, LEN, gamma, scratch);
        omp_set_num_threads(threads);
        double e = rel_err_f(out2, ref + (LEN - 1) * D, (size_t)D);
        CHECKF(e <= 1e-5, "len %lld diff %d gqa %d subln %d: %.3g", (long long)LEN, diff, gqa, sl, e);
        CHECKF(memcmp(out1, out2, (size_t)D * sizeof(real)) == 0,
               "len %lld diff %d gqa %d subln %d: thread count changes the bits", (long long)LEN, diff, gqa, sl);
        /* a bf16 cache's rows give the bits of the same rows widened, at every level and thread count */
        uint16_t *kb = malloc((size_t)(LEN * KV) * sizeof(uint16_t)), *vb = malloc((size_t)(LEN * KV) * sizeof(uint16_t));
        REQUIRE(kb && vb);
        for (int64_t i = 0; i < LEN * KV; i++) {
            kb[i] = dtx_f32_to_bf16((float)k[i]), k[i] = (real)dtx_bf16_to_f32(kb[i]);
            vb[i] = dtx_f32_to_bf16((float)v[i]), v[i] = (real)dtx_bf16_to_f32(vb[i]);
        }
        static const dtx_isa levels[] = {DTX_ISA_PORTABLE, DTX_ISA_AVX2, DTX_ISA_AVX512, DTX_ISA_AVX512_BF16};
        for (int li = 0; li < 4; li++) {
            if (levels[li] > dtx_isa_cpu()) continue;
            dtx_isa prev = dtx_isa_set_cap(levels[li]);
            for (int th = 1; th <= 2; th++) {
                omp_set_num_threads(th);
                dtx_attention_decode(&a, out1, qlast, k, v, LEN, gamma, scratch);
                dtx_attention_decode_bf16(&a, out2, qlast, kb, vb, LEN, gamma, scratch);
                CHECKF(memcmp(out1, out2, (size_t)D * sizeof(real)) == 0,
                       "len %lld diff %d gqa %d subln %d, %s, %d threads: bf16 rows differ from the rows widened",
                       (long long)LEN, diff, gqa, sl, dtx_isa_name(levels[li]), th);
            }
            omp_set_num_threads(threads);
            dtx_isa_set_cap(prev);
        }
        free(kb), free(vb);
        free(q), free(k), free(v), free(ref), free(att), free(o1), free(o2), free(rs), free(scratch);
    }
}

/* The chunked walk when the team is held by another thread: the blocks of
 * chunks are set for the team size, the run then goes alone, and that
 * thread must take its own block and the others' (work stealing from the
 * back). Same bits as with the team free. */
typedef struct {
    _Atomic int started, release;
} team_holder;
static void hold_team(void *arg, int id, int nt) {
    team_holder *h = arg;
    (void)nt;
    if (id == 0) atomic_store(&h->started, 1);
    while (!atomic_load(&h->release)) {
    }
}
static void *hold_team_thread(void *arg) {
    dtx_team_run(hold_team, arg);
    return NULL;
}
TEST(generate_attention_decode_chunks_taken_by_a_lone_thread) {
    const int threads = omp_get_max_threads();
    omp_set_num_threads(2);
    if (dtx_team_size() < 2) {
        omp_set_num_threads(threads);
        SKIP("one CPU: the team is one thread");
    }
    enum { LEN = 2100, D = 128, KV = 128 };
    dtx_attn_dims a = {.run.impl = DTX_ATTN_PLAIN, .geom.B = 1, .geom.T = LEN, .geom.n_heads = 4, .geom.n_kv_heads = 4,
                       .geom.head_dim = 16, .arch.diff = 1, .arch.subln = 1, .arch.lambda = 0.37, .arch.lambda_init = 0.2,
                       .arch.eps = 1e-5};
    real *k = malloc((size_t)LEN * KV * sizeof(real)), *v = malloc((size_t)LEN * KV * sizeof(real));
    real *scratch = malloc(dtx_attention_decode_scratch_size(&a, LEN) * sizeof(real)), q[D], gamma[32], free_out[D],
         lone_out[D];
    REQUIRE(k && v && scratch);
    dtx_rng r;
    dtx_rng_seed(&r, 77);
    for (int64_t i = 0; i < (int64_t)LEN * KV; i++) k[i] = (real)dtx_rng_normal(&r), v[i] = (real)dtx_rng_normal(&r);
    for (int i = 0; i < D; i++) q[i] = (real)dtx_rng_normal(&r);
    for (int i = 0; i < 32; i++) gamma[i] = (real)(1 + 0.3 * dtx_rng_normal(&r));
    dtx_attention_decode(&a, free_out, q, k, v, LEN, gamma, scratch);
    team_holder h;
    atomic_init(&h.started, 0), atomic_init(&h.release, 0);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, hold_team_thread, &h) == 0);
    while (!atomic_load(&h.started)) {
    }
    dtx_attention_decode(&a, lone_out, q, k, v, LEN, gamma, scratch); /* the team is busy: this thread alone */
    atomic_store(&h.release, 1);
    pthread_join(t, NULL);
    omp_set_num_threads(threads);
    CHECK(memcmp(free_out, lone_out, sizeof free_out) == 0);
    free(k), free(v), free(scratch);
}

/* A model large enough that the decode step's products and attention run
 * on several threads: a 290-token prefill, then 10 decodes, against the rows
 * of one full forward. */
TEST(generate_larger_model_matches_full_forward) {
    enum { T = 300, N0 = 290, V = 500 };
    for (int arch = 0; arch < 2; arch++) {
        dtx_config c = dtx_config_default();
        c.arch = (dtx_arch)arch;
        c.dim = 256;
        c.n_layers = 2;
        c.n_heads = arch == DTX_ARCH_DIFF ? 4 : 8;
        c.n_kv_heads = c.n_heads / 2;
        c.vocab_size = V;
        c.ffn_dim = 512;
        c.max_seq_len = T;
        dtx_model *m = NULL;
        REQUIRE(dtx_model_init(&m, &c, 17) == DTX_OK);
        int32_t *seq = malloc(T * sizeof *seq);
        real *all = malloc((size_t)T * V * sizeof *all), logits[V];
        REQUIRE(seq && all);
        dtx_rng r;
        dtx_rng_seed(&r, 2);
        for (int i = 0; i < T; i++) seq[i] = (int32_t)(dtx_rng_next(&r) % V);
        REQUIRE(dtx_model_forward(m, seq, NULL, 1, T, all, NULL) == DTX_OK);
        dtx_kvcache *kc = NULL;
        REQUIRE(dtx_kvcache_init(&kc, m, 0) == DTX_OK);
        double worst = 0;
        for (int n = N0; n <= T; n++) {
            dtx_status st = n == N0 ? dtx_model_prefill(m, kc, seq, N0, logits) : dtx_model_decode(m, kc, seq[n - 1], logits);
            REQUIRE(st == DTX_OK);
            double e = rel_err_f(logits, all + (size_t)(n - 1) * V, V);
            if (e > worst) worst = e;
        }
        CHECKF(worst <= 1e-5, "%s: worst %.3g", dtx_arch_name(c.arch), worst);
        dtx_kvcache_free(kc);
        free(seq);
        free(all);
        dtx_model_free(m);
    }
}

/* ------------------------------------------------------------ the sampler */

static int32_t draw(const dtx_sampler *s, dtx_rng *r, const real *logits, int64_t V) {
    int32_t t = -1;
    if (dtx_sample_logits(s, r, logits, V, &t) != DTX_OK) return -1;
    return t;
}

/* Frequencies of n draws into freq [V]. */
static void frequencies(const dtx_sampler *s, const real *logits, int64_t V, int n, double *freq) {
    dtx_rng r;
    dtx_rng_seed(&r, s->seed);
    for (int64_t i = 0; i < V; i++) freq[i] = 0;
    for (int i = 0; i < n; i++) {
        int32_t t = draw(s, &r, logits, V);
        if (t >= 0 && t < V) freq[t] += 1.0 / n;
    }
}

TEST(generate_sampler_greedy_and_truncation_to_one) {
    dtx_sampler s = dtx_sampler_default();
    CHECK(s.temperature == 0.8 && s.top_k == 0 && s.top_p == 1 && s.seed == 1);
    dtx_rng g;
    dtx_rng_seed(&g, 4);
    enum { V = 300 };
    real logits[V];
    for (int trial = 0; trial < 20; trial++) {
        for (int i = 0; i < V; i++) logits[i] = (real)(3 * dtx_rng_normal(&g));
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        dtx_rng r;
        dtx_rng_seed(&r, (uint64_t)trial);
        s = (dtx_sampler){.temperature = 0, .top_k = 0, .top_p = 1};
        CHECK(draw(&s, &r, logits, V) == best);
        s = (dtx_sampler){.temperature = 1.5, .top_k = 1, .top_p = 1};
        for (int k = 0; k < 10; k++) CHECK(draw(&s, &r, logits, V) == best);
        s = (dtx_sampler){.temperature = 1.5, .top_k = 0, .top_p = 1e-9};
        for (int k = 0; k < 10; k++) CHECK(draw(&s, &r, logits, V) == best);
        s = (dtx_sampler){.temperature = 1.5, .top_k = 50, .top_p = 1e-9};
        for (int k = 0; k < 10; k++) CHECK(draw(&s, &r, logits, V) == best);
    }
    /* ties: the lowest id, greedy or truncated */
    real tie[4] = {1, 5, 5, 2};
    dtx_rng r;
    dtx_rng_seed(&r, 1);
    s = (dtx_sampler){.temperature = 0};
    CHECK(draw(&s, &r, tie, 4) == 1);
    s = (dtx_sampler){.temperature = 1, .top_k = 1, .top_p = 1};
    CHECK(draw(&s, &r, tie, 4) == 1);
    s = (dtx_sampler){.temperature = 1, .top_k = 0, .top_p = 0.01};
    CHECK(draw(&s, &r, tie, 4) == 1);
}

/* p = (0.5, 0.3, 0.15, 0.05): which tokens each rule keeps, and that the
 * kept ones are drawn in renormalised proportion. */
TEST(generate_sampler_truncation_rules) {
    const double p[4] = {0.5, 0.3, 0.15, 0.05};
    real logits[4];
    for (int i = 0; i < 4; i++) logits[i] = (real)log(p[i]);
    struct {
        int64_t top_k;
        double top_p;
        double want[4];
    } cases[] = {
        {0, 1, {0.5, 0.3, 0.15, 0.05}},
        {2, 1, {0.625, 0.375, 0, 0}},
        {3, 1, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}},
        {0, 0.45, {1, 0, 0, 0}},
        {0, 0.75, {0.625, 0.375, 0, 0}},
        {0, 0.85, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}},
        {0, 0.99, {0.5, 0.3, 0.15, 0.05}},
        {3, 0.7, {0.625, 0.375, 0, 0}},   /* top-3 renormalised: 0.526, 0.842 ≥ 0.7 */
        {3, 0.9, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}},
        {4, 1, {0.5, 0.3, 0.15, 0.05}},
        {10, 1, {0.5, 0.3, 0.15, 0.05}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        dtx_sampler s = {.temperature = 1, .top_k = cases[c].top_k, .top_p = cases[c].top_p, .seed = 7 + c};
        double f[4];
        frequencies(&s, logits, 4, 20000, f);
        for (int i = 0; i < 4; i++) {
            if (cases[c].want[i] == 0) CHECKF(f[i] == 0, "top_k %lld top_p %g: token %d drawn (%.4f)",
                                               (long long)s.top_k, s.top_p, i, f[i]);
            else CHECKF(fabs(f[i] - cases[c].want[i]) < 0.02, "top_k %lld top_p %g: token %d at %.4f, want %.4f",
                        (long long)s.top_k, s.top_p, i, f[i], cases[c].want[i]);
        }
    }
}

/* Temperature 1 on a 3-token distribution: frequencies within 2% over 20k
 * draws (5 standard deviations); temperature 2 flattens it to p^(1/2). */
TEST(generate_sampler_frequencies) {
    const double p[3] = {0.6, 0.3, 0.1};
    real logits[3];
    for (int i = 0; i < 3; i++) logits[i] = (real)(log(p[i]) + 4); /* a shift changes nothing */
    dtx_sampler s = {.temperature = 1, .top_k = 0, .top_p = 1, .seed = 42};
    double f[3];
    frequencies(&s, logits, 3, 20000, f);
    for (int i = 0; i < 3; i++) CHECKF(fabs(f[i] - p[i]) < 0.02, "T=1: token %d at %.4f, want %.2f", i, f[i], p[i]);
    s.temperature = 2;
    frequencies(&s, logits, 3, 20000, f);
    double z = sqrt(0.6) + sqrt(0.3) + sqrt(0.1);
    for (int i = 0; i < 3; i++)
        CHECKF(fabs(f[i] - sqrt(p[i]) / z) < 0.02, "T=2: token %d at %.4f, want %.4f", i, f[i], sqrt(p[i]) / z);
}

/* A nucleus much larger than the first selection round (64): a near-uniform
 * 1000-token distribution. Every drawn id is in the nucleus computed by a
 * full sort, and most of the nucleus is drawn. */
TEST(generate_sampler_large_nucleus) {
    enum { V = 1000, DRAWS = 4000 };
    static real logits[V];
    static int order[V], seen[V];
    dtx_rng g;
    dtx_rng_seed(&g, 8);
    for (int i = 0; i < V; i++) logits[i] = (real)(0.3 * dtx_rng_normal(&g));
    double z = 0, e[V];
    for (int i = 0; i < V; i++) z += e[i] = exp((double)logits[i]);
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = 1; i < V; i++) /* insertion sort by probability, ties by id */
        for (int j = i; j > 0 && (e[order[j]] > e[order[j - 1]] ||
                                  (e[order[j]] == e[order[j - 1]] && order[j] < order[j - 1])); j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    double acc = 0;
    int keep = 0;
    while (acc < 0.7 * z) acc += e[order[keep++]];
    CHECK(keep > 256); /* needs at least three selection rounds */
    int in[V] = {0};
    for (int i = 0; i < keep; i++) in[order[i]] = 1;
    dtx_sampler s = {.temperature = 1, .top_k = 0, .top_p = 0.7, .seed = 5};
    dtx_rng r;
    dtx_rng_seed(&r, 5);
    int outside = 0, distinct = 0;
    for (int i = 0; i < DRAWS; i++) {
        int32_t t = draw(&s, &r, logits, V);
        REQUIRE(t >= 0 && t < V);
        outside += !in[t];
        distinct += !seen[t];
        seen[t] = 1;
    }
    CHECKF(outside == 0, "%d draws outside the nucleus of %d", outside, keep);
    CHECKF(distinct > keep * 3 / 4, "only %d of %d nucleus tokens drawn", distinct, keep);
}

TEST(generate_sampler_seed_determinism_and_validation) {
    enum { V = 50, N = 200 };
    real logits[V];
    dtx_rng g;
    dtx_rng_seed(&g, 3);
    for (int i = 0; i < V; i++) logits[i] = (real)dtx_rng_normal(&g);
    int32_t a[N], b[N], c[N];
    dtx_sampler s = {.temperature = 0.9, .top_k = 20, .top_p = 0.9, .seed = 77};
    dtx_rng ra, rb, rc;
    dtx_rng_seed(&ra, 77);
    dtx_rng_seed(&rb, 77);
    dtx_rng_seed(&rc, 78);
    for (int i = 0; i < N; i++) {
        a[i] = draw(&s, &ra, logits, V);
        b[i] = draw(&s, &rb, logits, V);
        c[i] = draw(&s, &rc, logits, V);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    CHECK(dtx_sampler_validate(&s) == DTX_OK);
    dtx_sampler bad = s;
    bad.top_k = -1;
    CHECK(dtx_sampler_validate(&bad) == DTX_ERR_ARG && strstr(dtx_last_error(), "top_k"));
    bad = s;
    bad.top_p = 0;
    CHECK(dtx_sampler_validate(&bad) == DTX_ERR_ARG && strstr(dtx_last_error(), "top_p"));
    bad.top_p = 1.5;
    CHECK(dtx_sampler_validate(&bad) == DTX_ERR_ARG);
    bad.top_p = NAN;
    CHECK(dtx_sampler_validate(&bad) == DTX_ERR_ARG);
    bad = s;
    bad.temperature = NAN;
    CHECK(dtx_sampler_validate(&bad) == DTX_ERR_ARG);
    int32_t t;
    CHECK(dtx_sample_logits(&s, &ra, logits, 0, &t) == DTX_ERR_ARG);
}

/* Truncating back to a shared prefix and appending another continuation gives
 * the logits of that continuation computed from scratch. */
TEST(generate_truncate_shares_prefix) {
    dtx_model *m = make_model(DTX_ARCH_DIFF, 1, 0, 23);
    REQUIRE(m);
    dtx_kvcache *c = NULL;
    REQUIRE(dtx_kvcache_init(&c, m, MAXLEN) == DTX_OK);
    int32_t seq[20];
    random_tokens(seq, 20, 5);
    real got[VOCAB], want[VOCAB];
    REQUIRE(dtx_model_prefill(m, c, seq, 10, NULL) == DTX_OK);
    REQUIRE(dtx_model_prefill(m, c, seq + 10, 5, NULL) == DTX_OK); /* continuation A */
    REQUIRE(dtx_kvcache_truncate(c, 10) == DTX_OK);
    CHECK(dtx_kvcache_len(c) == 10);
    int32_t other[14];
    memcpy(other, seq, 10 * sizeof(int32_t));
    other[10] = 7, other[11] = 8, other[12] = 9, other[13] = 2; /* continuation B */
    REQUIRE(dtx_model_prefill(m, c, other + 10, 3, NULL) == DTX_OK);
    REQUIRE(dtx_model_decode(m, c, other[13], got) == DTX_OK);
    REQUIRE(full_last(m, other, 14, want) == 0);
    double mx = 0, err = 0;
    for (int i = 0; i < VOCAB; i++) {
        mx = fmax(mx, fabs((double)want[i]));
        err = fmax(err, fabs((double)got[i] - (double)want[i]));
    }
    CHECKF(err <= 1e-5 * mx, "truncated-cache logits differ by %g (max |logit| %g)", err, mx);
    CHECK(dtx_kvcache_truncate(c, 15) == DTX_ERR_ARG);
    CHECK(dtx_kvcache_truncate(c, -1) == DTX_ERR_ARG);
    dtx_kvcache_free(c);
    dtx_model_free(m);
}
