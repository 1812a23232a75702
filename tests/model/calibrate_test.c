/* dtx_model_quantize (calibrate.c): W8A8's absmax scales are the inputs'
 * absolute maxima over the calibration set; percentile and MSE ranges lie
 * inside them; the clipping search never does worse than absmax on what
 * it measured and keeps 8-bit models close to fp32; the refusals. */
#include "../test.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { VOCAB = 53, LEN = 16, NSEQ = 6 };

static dtx_model *model(uint64_t seed) {
    dtx_config c = test_config(DTX_ARCH_DIFF, 64, 2, 2, 2, VOCAB, 96, LEN, 1);
    dtx_model *m = NULL;
    return dtx_model_init(&m, &c, seed) == DTX_OK ? m : NULL;
}

/* t [n] from seed's stream (a held-out sequence is the first LEN of such a stream). */
static void calib_tokens(int32_t *t, int n, uint64_t seed) {
    dtx_rng r;
    dtx_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) t[i] = (int32_t)(dtx_rng_next(&r) % VOCAB);
}

static double loss_of(dtx_model *m, const int32_t *tok) {
    double loss = 0;
    return dtx_model_forward(m, tok, tok + 1, 1, LEN - 1, NULL, &loss) == DTX_OK ? loss : NAN;
}

TEST(calibrate_w8a8_absmax_scales_are_the_inputs_maxima) {
    int32_t tok[NSEQ * LEN];
    calib_tokens(tok, NSEQ * LEN, 1);
    dtx_model *m = model(5), *ref = model(5);
    REQUIRE(m && ref);
    /* the reference maxima: xn1 of layer 0 (q/k/v's input) and q, k after RoPE, over every sequence */
    double amax_xn1 = 0, amax_q = 0;
    for (int s = 0; s < NSEQ; s++) {
        REQUIRE(dtx_model_forward(ref, tok + s * LEN, NULL, 1, LEN, NULL, NULL) == DTX_OK);
        for (int i = 0; i < LEN * 64; i++) {
            amax_xn1 = fmax(amax_xn1, fabs(ref->acts.layers[0].xn1[i]));
            amax_q = fmax(amax_q, fabs(ref->acts.layers[1].q[i]));
        }
    }
    dtx_quant_options o = dtx_quant_options_default(DTX_WQ_W8A8);
    dtx_quant_summary sum;
    REQUIREF(dtx_model_quantize(m, &o, tok, NSEQ, LEN, &sum) == DTX_OK, "%s", dtx_last_error());
    const dtx_qweight *wq = dtx_model_qweight(m, m->layers[0].wq), *wv = dtx_model_qweight(m, m->layers[0].wv);
    REQUIRE(wq && wv);
    CHECKF(fabs(wq->in_scale * 127.0 - amax_xn1) <= 1e-6 * amax_xn1, "in_scale·127 %g, absmax %g",
           wq->in_scale * 127.0, amax_xn1);
    CHECK(wq->in_scale == wv->in_scale); /* one input, one scale */
    CHECKF(fabs(m->qk_scale[2] * 127.0 - amax_q) <= 1e-6 * amax_q, "q scale·127 %g, absmax %g",
           m->qk_scale[2] * 127.0, amax_q);
    CHECK(sum.rows == NSEQ * LEN && sum.act_clip > 0.999 && sum.act_clip < 1.001);
    CHECK(sum.mean_clip > 0.69 && sum.mean_clip <= 1.0);
    dtx_model_free(m), dtx_model_free(ref);
}

TEST(calibrate_percentile_and_mse_ranges_lie_inside_absmax) {
    int32_t tok[NSEQ * LEN];
    calib_tokens(tok, NSEQ * LEN, 2);
    float absmax_scale = 0;
    for (int method = 0; method < 3; method++) {
        dtx_model *m = model(6);
        REQUIRE(m);
        dtx_quant_options o = dtx_quant_options_default(DTX_WQ_W8A8);
        o.act_method = (dtx_calib_method)method;
        o.percentile = 99.0;
        o.clip_search = 0;
        dtx_quant_summary sum;
        REQUIREF(dtx_model_quantize(m, &o, tok, NSEQ, LEN, &sum) == DTX_OK, "%s", dtx_last_error());
        float s = dtx_model_qweight(m, m->layers[1].w2)->in_scale;
        if (method == 0) absmax_scale = s;
        else CHECKF(s > 0 && s < absmax_scale, "%s scale %g, absmax %g", dtx_calib_method_name(o.act_method), s,
                    absmax_scale);
        CHECK(method == 0 ? sum.act_clip > 0.999 : sum.act_clip < 1.0);
        CHECK(sum.mean_clip == 1.0); /* no search */
        dtx_model_free(m);
    }
}

TEST(calibrate_keeps_the_loss_close) {
    int32_t tok[NSEQ * LEN], held[LEN];
    calib_tokens(tok, NSEQ * LEN, 3);
    calib_tokens(held, LEN, 4);
    static const dtx_wquant schemes[] = {DTX_WQ_W8A16, DTX_WQ_W8A8, DTX_WQ_W4A16};
    static const double tol[] = {0.01, 0.03, 0.08}; /* relative to the fp32 loss of a random model */
    dtx_model *fp = model(7);
    REQUIRE(fp);
    double base = loss_of(fp, held);
    for (int si = 0; si < 3; si++)
        for (int search = 0; search < 2; search++) {
            dtx_model *m = model(7);
            REQUIRE(m);
            dtx_quant_options o = dtx_quant_options_default(schemes[si]);
            o.clip_search = search;
            REQUIRE(dtx_model_quantize(m, &o, tok, NSEQ, LEN, NULL) == DTX_OK);
            double l = loss_of(m, held);
            CHECKF(fabs(l - base) < tol[si] * base, "%s search %d: loss %.5f vs fp32 %.5f",
                   dtx_wquant_name(schemes[si]), search, l, base);
            dtx_model_free(m);
        }
    dtx_model_free(fp);
}

/* W8A8 keeping every kind of input 16-bit is W8A16 (the same clipping, the
 * same logits); keeping one kind gives that kind's tensors scale 0 and only
 * those; the kinds' names. */
TEST(calibrate_w8a8_a16_inputs) {
    int32_t tok[NSEQ * LEN], held[LEN];
    calib_tokens(tok, NSEQ * LEN, 11);
    calib_tokens(held, LEN, 12);
    dtx_model *a = model(9), *b = model(9), *k = model(9);
    REQUIRE(a && b && k);
    dtx_quant_options oa = dtx_quant_options_default(DTX_WQ_W8A8), ob = dtx_quant_options_default(DTX_WQ_W8A16);
    oa.a16_inputs = DTX_A8_ALL;
    REQUIRE(dtx_model_quantize(a, &oa, tok, NSEQ, LEN, NULL) == DTX_OK);
    REQUIRE(dtx_model_quantize(b, &ob, tok, NSEQ, LEN, NULL) == DTX_OK);
    float *la = malloc(sizeof(float) * LEN * VOCAB), *lb = malloc(sizeof(float) * LEN * VOCAB);
    REQUIRE(dtx_model_forward(a, held, NULL, 1, LEN, la, NULL) == DTX_OK);
    REQUIRE(dtx_model_forward(b, held, NULL, 1, LEN, lb, NULL) == DTX_OK);
    CHECK(memcmp(la, lb, sizeof(float) * LEN * VOCAB) == 0);
    oa.a16_inputs = DTX_A8_FFN_HIDDEN; /* only w2's input stays bf16 */
    REQUIRE(dtx_model_quantize(k, &oa, tok, NSEQ, LEN, NULL) == DTX_OK);
    int wrong = 0;
    for (int i = 0; i < k->n_tensors; i++) {
        if (k->tensors[i].ndim != 2) continue;
        int w2 = 0;
        for (int64_t l = 0; l < k->cfg.n_layers; l++) w2 |= k->tensors[i].offset == k->layers[l].w2;
        wrong += w2 ? k->qw[i].in_scale != 0 : !(k->qw[i].in_scale > 0);
    }
    CHECKF(wrong == 0, "%d tensors have the wrong input scale", wrong);
    for (int64_t j = 0; j < 2 * k->cfg.n_layers; j++) CHECK(k->qk_scale[j] > 0);
    CHECK(!strcmp(dtx_a8_kind_name(DTX_A8_QK), "qk") && !strcmp(dtx_a8_kind_name(DTX_A8_OUTPUT), "output"));
    CHECK(dtx_a8_kind_name(3) == NULL && dtx_a8_kind_name(0) == NULL);
    free(la), free(lb);
    dtx_model_free(a), dtx_model_free(b), dtx_model_free(k);
}

TEST(calibrate_refusals) {
    int32_t tok[NSEQ * LEN];
    calib_tokens(tok, NSEQ * LEN, 5);
    dtx_model *m = model(8);
    REQUIRE(m);
    dtx_quant_options o = dtx_quant_options_default(DTX_WQ_W8A16);
    CHECK(dtx_model_quantize(m, &o, tok, 0, LEN, NULL) == DTX_ERR_ARG);
    CHECK(dtx_model_quantize(m, &o, tok, NSEQ, LEN + 1, NULL) == DTX_ERR_ARG);
    o.act_method = DTX_CALIB_PERCENTILE, o.percentile = 40;
    CHECK(dtx_model_quantize(m, &o, tok, NSEQ, LEN, NULL) == DTX_ERR_ARG && strstr(dtx_last_error(), "percentile"));
    o = dtx_quant_options_default(DTX_WQ_W8A16);
    o.a16_inputs = DTX_A8_QK; /* for w8a8 only */
    CHECK(dtx_model_quantize(m, &o, tok, NSEQ, LEN, NULL) == DTX_ERR_ARG && strstr(dtx_last_error(), "a16_inputs"));
    o = dtx_quant_options_default(DTX_WQ_W8A8);
    o.a16_inputs = 64;
    CHECK(dtx_model_quantize(m, &o, tok, NSEQ, LEN, NULL) == DTX_ERR_ARG && strstr(dtx_last_error(), "a16_inputs"));
    o = dtx_quant_options_default(DTX_WQ_W8A8);
    o.act_fp16 = 1;
    CHECK(dtx_model_quantize(m, &o, tok, NSEQ, LEN, NULL) == DTX_ERR_ARG && strstr(dtx_last_error(), "fp16"));
    o = dtx_quant_options_default((dtx_wquant)9);
    CHECK(dtx_model_quantize(m, &o, tok, NSEQ, LEN, NULL) == DTX_ERR_ARG);
    tok[3] = VOCAB; /* an id outside the vocabulary */
    o = dtx_quant_options_default(DTX_WQ_W8A16);
    CHECK(dtx_model_quantize(m, &o, tok, NSEQ, LEN, NULL) == DTX_ERR_ARG && strstr(dtx_last_error(), "out of range"));
    CHECK(dtx_model_wquant(m) == DTX_WQ_NONE);
    tok[3] = 0;
    CHECK(dtx_model_quantize(m, &o, tok, NSEQ, LEN, NULL) == DTX_OK);
    CHECK(dtx_model_quantize(m, &o, tok, NSEQ, LEN, NULL) == DTX_ERR_ARG && strstr(dtx_last_error(), "already"));
    dtx_calib_method cm;
    CHECK(dtx_calib_method_parse("mse", &cm) && cm == DTX_CALIB_MSE && !dtx_calib_method_parse("max", &cm));
    dtx_model_free(m);
}
