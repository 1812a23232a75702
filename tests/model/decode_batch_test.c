/* Batched decoding (generate.c dtx_model_decode_batch, rowdot.c's batched
 * one-row products): a step of several sequences together gives, for every
 * sequence, exactly the bits dtx_model_decode gives it alone, for every
 * architecture, MHA and GQA, fp32 and bf16 products, weights quantised
 * (w8a16, w8a8, w4a16) or bf16 in place, and quantised attention logits,
 * while sequences join, pause and leave the batch between steps; and the
 * step refuses bad batches before it changes anything. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "model/model.h"

enum { VOCAB = 67, MAXLEN = 40, NSEQ = 6, STEPS = 9 };

/* ffn 88 is not a multiple of 32 (a partial 4-bit group); dim 64 */
static dtx_model *model_of(dtx_arch arch, int gqa, uint64_t seed) {
    int64_t h = arch == DTX_ARCH_DIFF ? 2 : 4;
    dtx_config c = test_config(arch, 64, 2, h, gqa ? 1 : h, VOCAB, 88, MAXLEN, arch != DTX_ARCH_DIFF);
    dtx_model *m = NULL;
    return dtx_model_init(&m, &c, seed) == DTX_OK ? m : NULL;
}

/* Which sequences step together at step s (bit i: sequence i): they join
 * late (1-4 at step 1, 5 at step 3), pause (2 at steps 2 and 5), run alone
 * (0 at steps 0 and 6: a batch of one on a fresh cache) and leave (0 after
 * step 6). */
static unsigned members(int s) {
    static const unsigned at[STEPS] = {0x01, 0x1F, 0x1B, 0x3F, 0x3B, 0x39, 0x01, 0x3E, 0x3C};
    return at[s];
}

/* Prefills sequence i (i + 1 tokens) in a and b, then runs the steps: each
 * member of a step decoded alone in a, all of them in one batched step in b;
 * every logit compared bit for bit. Returns the number of mismatching rows. */
static int run_batches(dtx_model *m, const char *what) {
    dtx_kvcache *a[NSEQ] = {0}, *b[NSEQ] = {0};
    float *single = malloc(sizeof(float) * VOCAB), *batch = malloc(sizeof(float) * NSEQ * VOCAB);
    int32_t last[NSEQ], tok[NSEQ];
    int bad = 0, prefilled = 0;
    dtx_rng r;
    dtx_rng_seed(&r, 3);
    for (int i = 0; i < NSEQ; i++)
        if (dtx_kvcache_init(&a[i], m, MAXLEN - i) || dtx_kvcache_init(&b[i], m, MAXLEN - i)) goto fail;
    for (int s = 0; s < STEPS; s++) {
        dtx_kvcache *ca[NSEQ];
        int n = 0, who[NSEQ];
        for (int i = 0; i < NSEQ; i++) {
            if (!(members(s) >> i & 1)) continue;
            if (!(prefilled >> i & 1)) { /* joins: its prompt, in both */
                int32_t p[NSEQ + 1];
                for (int j = 0; j <= i; j++) p[j] = (int32_t)(dtx_rng_next(&r) % VOCAB);
                if (dtx_model_prefill(m, a[i], p, i + 1, single) || dtx_model_prefill(m, b[i], p, i + 1, NULL))
                    goto fail;
                prefilled |= 1u << i;
                last[i] = (int32_t)(dtx_rng_next(&r) % VOCAB);
            }
            who[n] = i, ca[n] = b[i], tok[n++] = last[i];
        }
        if (dtx_model_decode_batch(m, ca, tok, n, batch)) goto fail;
        for (int j = 0; j < n; j++) {
            int i = who[j];
            if (dtx_model_decode(m, a[i], last[i], single)) goto fail;
            if (memcmp(single, batch + j * VOCAB, sizeof(float) * VOCAB) != 0) {
                if (!bad) test_fail_at(__FILE__, __LINE__, "%s: step %d, sequence %d differs from decoding alone", what, s, i);
                bad++;
            }
            CHECK(dtx_kvcache_len(a[i]) == dtx_kvcache_len(b[i]));
            last[i] = (int32_t)(dtx_rng_next(&r) % VOCAB);
        }
    }
    goto done;
fail:
    test_fail_at(__FILE__, __LINE__, "%s: %s", what, dtx_last_error());
    bad++;
done:
    for (int i = 0; i < NSEQ; i++) dtx_kvcache_free(a[i]), dtx_kvcache_free(b[i]);
    free(single);
    free(batch);
    return bad;
}

TEST(decode_batch_equals_single_decoding_bit_for_bit) {
    static const dtx_arch archs[] = {DTX_ARCH_DIFF, DTX_ARCH_TRANSFORMER, DTX_ARCH_DIFF2};
    for (int ai = 0; ai < 3; ai++)
        for (int gqa = 0; gqa < 2; gqa++)
            for (int prec = 0; prec < 2; prec++) {
                dtx_model *m = model_of(archs[ai], gqa, 7 + (uint64_t)ai);
                REQUIRE(m);
                REQUIRE(dtx_model_set_precision(m, prec ? DTX_PREC_BF16 : DTX_PREC_FP32) == DTX_OK);
                char what[96];
                snprintf(what, sizeof what, "%s %s %s", dtx_arch_name(archs[ai]), gqa ? "gqa" : "mha",
                         prec ? "bf16" : "fp32");
                CHECK(run_batches(m, what) == 0);
                dtx_model_free(m);
            }
}

TEST(decode_batch_quantised_weights_and_attention) {
    static const dtx_wquant schemes[] = {DTX_WQ_W8A16, DTX_WQ_W8A8, DTX_WQ_W4A16};
    for (int ai = 0; ai < 3; ai++)
        for (int si = 0; si < 3; si++) {
            dtx_arch arch = (dtx_arch)ai;
            dtx_model *m = model_of(arch, 1, 21 + (uint64_t)ai);
            REQUIRE(m);
            float *in = calloc((size_t)m->n_tensors, sizeof(float)), qk[4];
            for (int i = 0; i < m->n_tensors; i++) in[i] = m->tensors[i].ndim == 2 ? 0.03f : 0;
            for (int l = 0; l < 4; l++) qk[l] = 0.02f;
            REQUIREF(dtx_model_quantize_weights(m, schemes[si], NULL, in, qk) == DTX_OK, "%s", dtx_last_error());
            free(in);
            char what[96];
            snprintf(what, sizeof what, "%s %s", dtx_arch_name(arch), dtx_wquant_name(schemes[si]));
            CHECK(run_batches(m, what) == 0);
            /* quantised attention logits, each row's tensor its own */
            REQUIRE(dtx_model_set_attention_quant(m, 4, DTX_QUANT_TENSOR) == DTX_OK);
            strcat(what, ", 4-bit attention per tensor");
            CHECK(run_batches(m, what) == 0);
            dtx_model_free(m);
        }
}

TEST(decode_batch_bf16_in_place) {
    for (int ai = 0; ai < 3; ai++) {
        dtx_model *src = model_of((dtx_arch)ai, 0, 31 + (uint64_t)ai);
        REQUIRE(src);
        const char *path = test_path("batch.bf16.safetensors");
        REQUIRE(dtx_model_save(src, path, 1) == DTX_OK);
        dtx_model_free(src);
        dtx_model *m = NULL;
        REQUIREF(dtx_model_open(&m, path, DTX_PREC_BF16) == DTX_OK, "%s", dtx_last_error());
        char what[64];
        snprintf(what, sizeof what, "%s bf16 file", dtx_arch_name((dtx_arch)ai));
        CHECK(run_batches(m, what) == 0);
        dtx_model_free(m);
    }
}

TEST(decode_batch_refuses_bad_batches_before_any_work) {
    dtx_model *m = model_of(DTX_ARCH_DIFF, 0, 5), *other = model_of(DTX_ARCH_TRANSFORMER, 0, 5);
    REQUIRE(m && other);
    dtx_kvcache *c[3] = {0}, *foreign = NULL;
    REQUIRE(dtx_kvcache_init(&c[0], m, 4) == DTX_OK && dtx_kvcache_init(&c[1], m, 2) == DTX_OK);
    REQUIRE(dtx_kvcache_init(&foreign, other, 4) == DTX_OK);
    int32_t p[2] = {1, 2}, tok[3] = {3, 4, 5};
    REQUIRE(dtx_model_prefill(m, c[0], p, 1, NULL) == DTX_OK && dtx_model_prefill(m, c[1], p, 2, NULL) == DTX_OK);
    /* c[1] is full */
    CHECK(dtx_model_decode_batch(m, c, tok, 2, NULL) == DTX_ERR_ARG);
    CHECK(strstr(dtx_last_error(), "sequence 1 is full"));
    CHECK(dtx_kvcache_len(c[0]) == 1);
    dtx_kvcache *same[2] = {c[0], c[0]};
    CHECK(dtx_model_decode_batch(m, same, tok, 2, NULL) == DTX_ERR_ARG);
    CHECK(strstr(dtx_last_error(), "share one KV cache"));
    dtx_kvcache *mixed[2] = {c[0], foreign};
    CHECK(dtx_model_decode_batch(m, mixed, tok, 2, NULL) == DTX_ERR_ARG);
    CHECK(strstr(dtx_last_error(), "another shape"));
    int32_t badtok[1] = {VOCAB};
    CHECK(dtx_model_decode_batch(m, c, badtok, 1, NULL) == DTX_ERR_ARG);
    CHECK(strstr(dtx_last_error(), "out of range"));
    CHECK(dtx_model_decode_batch(m, c, tok, 0, NULL) == DTX_ERR_ARG);
    CHECK(dtx_kvcache_len(c[0]) == 1 && dtx_kvcache_len(c[1]) == 2);
    dtx_kvcache_free(c[0]), dtx_kvcache_free(c[1]), dtx_kvcache_free(foreign);
    dtx_model_free(m), dtx_model_free(other);
}
