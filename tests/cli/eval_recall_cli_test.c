/* difftx train --recall-frac and difftx eval recall, as separate processes:
 * the JSON's arithmetic (answers, accuracy and its interval; a softmax map's
 * four segments cover each row exactly, so they sum to 1; the
 * Transformer's one map is both A1 and the combined one), a hand-made model
 * whose every prediction is the pad id (accuracy exactly 0), and the
 * one-line refusals of both commands. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "difftx.h"
#include "eval/needle.h"
#include "test.h"

enum { VOCAB = 64, SEQ = 48 };

static const char *tokens_file(void) {
    static const char *p;
    if (p) return p;
    const char *path = test_path("recall_tokens.txt");
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    for (int i = 0; i < 400; i++) fprintf(f, "%d ", (i * 17) % VOCAB);
    fclose(f);
    return p = path;
}

/* A model trained a few steps on recall rows only. */
static const char *trained(const char *arch) {
    static char paths[2][512];
    int k = !strcmp(arch, "transformer");
    if (paths[k][0]) return paths[k];
    snprintf(paths[k], sizeof paths[k], "%s", test_path(k ? "recall_tf.safetensors" : "recall_diff.safetensors"));
    int rc = cli("train --tokens %s --out %s --arch %s --dim 32 --layers 1 --heads %d --vocab %d --ffn 64 --seq %d "
                 "--batch 4 --steps 3 --recall-frac 1 --recall-queries 4 --recall-distractors 8 --seed 3",
                 tokens_file(), paths[k], arch, k ? 4 : 2, VOCAB, SEQ - 1);
    if (rc != 0 || !cli_has("12 associative recall episodes")) { /* 3 steps of 4 rows */
        test_fail_at(__FILE__, __LINE__, "train: rc %d: %s", rc, cli_out);
        paths[k][0] = 0;
        return NULL;
    }
    return paths[k];
}

static cJSON *recall_json(const char *model, const char *extra) {
    const char *js = test_path("recall.json");
    int rc = cli("eval recall --model %s --queries 4 --episodes 20 --json %s %s", model, js, extra);
    if (rc != 0) {
        test_fail_at(__FILE__, __LINE__, "eval recall: rc %d: %s", rc, cli_out);
        return NULL;
    }
    return read_json(js);
}

static void check_counts(const cJSON *root, int transformer, const int64_t *want, int n_want) {
    const cJSON *counts = cJSON_GetObjectItem(root, "counts");
    REQUIRE(cJSON_GetArraySize(counts) == n_want);
    for (int i = 0; i < n_want; i++) {
        const cJSON *c = cJSON_GetArrayItem(counts, i);
        double right = json_num(c, "right"), n = json_num(c, "n"), lo, hi;
        CHECKF(json_num(c, "distractors") == (double)want[i], "count %d: %g distractors", i, json_num(c, "distractors"));
        CHECK(n == 20 * 4 && right >= 0 && right <= n && fabs(json_num(c, "acc") - right / n) < 1e-12);
        dtx_wilson95((int64_t)right, (int64_t)n, &lo, &hi);
        CHECK(fabs(json_num(c, "lo") - lo) < 1e-12 && fabs(json_num(c, "hi") - hi) < 1e-12);
        const cJSON *all = cJSON_GetObjectItem(c, "all"), *ok = cJSON_GetObjectItem(c, "answered"),
                    *bad = cJSON_GetObjectItem(c, "missed");
        CHECK(json_num(all, "answers") == n && json_num(ok, "answers") == right &&
              json_num(bad, "answers") == n - right);
        const cJSON *a1 = cJSON_GetObjectItem(all, "a1"), *comb = cJSON_GetObjectItem(all, "combined");
        double sum = json_num(a1, "answer") + json_num(a1, "distractors") + json_num(a1, "other_pairs") +
                     json_num(a1, "queries");
        CHECKF(fabs(sum - 1) < 1e-9, "count %g: A1's segments sum to %.12g", (double)want[i], sum);
        CHECK(json_num(a1, "answer") > 0 && (want[i] == 0) == (json_num(a1, "distractors") == 0));
        if (want[i] > 0)
            CHECK(fabs(json_num(a1, "per_distractor") - json_num(a1, "distractors") / (double)want[i]) < 1e-12);
        if (transformer) {
            CHECK(json_num(comb, "answer") == json_num(a1, "answer"));
            CHECK(json_num(c, "lambda_mean") == 0);
        } else {
            double lam = json_num(c, "lambda_mean");
            CHECKF(lam > 0 && lam < 1, "lambda %g", lam);
        }
    }
}

TEST(eval_recall_cli_json_arithmetic) {
    static const int64_t counts[] = {0, 3, 8};
    for (int k = 0; k < 2; k++) {
        const char *m = trained(k ? "transformer" : "diff");
        REQUIRE(m);
        cJSON *root = recall_json(m, "--distractors 0,3,8");
        REQUIRE(root);
        check_counts(root, k, counts, 3);
        CHECK(json_num(root, "queries") == 4 && json_num(root, "episodes") == 20);
        const cJSON *c3 = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "counts"), 1);
        double right3 = json_num(c3, "right"),
               ans3 = json_num(cJSON_GetObjectItem(cJSON_GetObjectItem(c3, "all"), "a1"), "answer");
        cJSON_Delete(root);
        /* the same episodes whatever else is asked: count 3 alone gives count 3's numbers */
        cJSON *one = recall_json(m, "--distractors 3");
        REQUIRE(one);
        const cJSON *o3 = cJSON_GetArrayItem(cJSON_GetObjectItem(one, "counts"), 0);
        CHECK(json_num(o3, "right") == right3 &&
              json_num(cJSON_GetObjectItem(cJSON_GetObjectItem(o3, "all"), "a1"), "answer") == ans3);
        cJSON_Delete(one);
    }
}

/* Every position predicts id 0 (the pad, never a value): accuracy exactly 0. */
TEST(eval_recall_cli_pad_model_answers_nothing) {
    dtx_config c = test_config(DTX_ARCH_TRANSFORMER, 16, 1, 2, 2, VOCAB, 32, SEQ, 0);
    dtx_model *m = NULL;
    REQUIRE(dtx_model_init(&m, &c, 5) == DTX_OK);
    const dtx_tensor_info *out = dtx_model_find(m, "output.weight");
    REQUIRE(out);
    dtx_real *w = dtx_model_params(m) + out->offset;
    /* every token embedded as one vector e, attention and feed-forward writing nothing: the final hidden
     * state is e normalised at every position; output row 0 = e and every other row -e */
    const dtx_tensor_info *emb = dtx_model_find(m, "tok_embeddings.weight");
    REQUIRE(emb);
    dtx_real *e = dtx_model_params(m) + emb->offset;
    for (int64_t v = 0; v < VOCAB; v++)
        for (int64_t d = 0; d < c.dim; d++) e[v * c.dim + d] = e[d]; /* every token the same vector */
    size_t n = 0;
    const char *zero[] = {"layers.0.attention.out_proj.weight", "layers.0.feed_forward.w2.weight"};
    for (int i = 0; i < 2; i++) {
        const dtx_tensor_info *t = dtx_model_find(m, zero[i]);
        REQUIRE(t);
        n = t->numel;
        memset(dtx_model_params(m) + t->offset, 0, n * sizeof(dtx_real));
    }
    for (int64_t v = 0; v < VOCAB; v++)
        for (int64_t d = 0; d < c.dim; d++) w[v * c.dim + d] = v == 0 ? e[d] : -e[d];
    const char *path = test_path("recall_pad.safetensors");
    REQUIRE(dtx_model_save(m, path, 0) == DTX_OK);
    dtx_model_free(m);
    cJSON *root = recall_json(path, "--distractors 0,5");
    REQUIRE(root);
    const cJSON *counts = cJSON_GetObjectItem(root, "counts");
    for (int i = 0; i < cJSON_GetArraySize(counts); i++) {
        const cJSON *ci = cJSON_GetArrayItem(counts, i);
        CHECKF(json_num(ci, "right") == 0 && json_num(ci, "acc") == 0, "count %d: %g right", i, json_num(ci, "right"));
    }
    cJSON_Delete(root);
}

TEST(eval_recall_cli_refusals) {
    const char *m = trained("diff");
    REQUIRE(m);
    const char *P = "difftx eval recall: ";
    /* 31 keys in a vocabulary of 64: 4 queries and 30 distractors do not fit */
    int rc = cli("eval recall --model %s --queries 4 --distractors 30", m);
    CHECKF(rc == 2 && cli_one_line_from(P) && cli_has("distinct keys"), "rc %d: %s", rc, cli_out);
    /* 2·(8 + 20) = 56 tokens, more than the model's 47 (its --seq) */
    rc = cli("eval recall --model %s --queries 4 --distractors 20", m);
    CHECKF(rc == 2 && cli_one_line_from(P) && cli_has("max_seq_len 47"), "rc %d: %s", rc, cli_out);
    rc = cli("eval recall --model %s --distractors 1,x", m);
    CHECKF(rc == 2 && cli_one_line_from(P), "rc %d: %s", rc, cli_out);
    rc = cli("eval recall --model %s --queries 0", m);
    CHECKF(rc == 2 && cli_one_line_from(P), "rc %d: %s", rc, cli_out);
    /* training rows too short for the longest episode: 2·(2·4 + 24) = 64 > 48 */
    rc = cli("train --tokens %s --out %s --arch diff --dim 32 --layers 1 --heads 2 --vocab %d --ffn 64 --seq %d "
             "--steps 1 --recall-frac 1 --recall-queries 4 --recall-distractors 24",
             tokens_file(), test_path("recall_no.safetensors"), VOCAB, SEQ - 1);
    CHECKF(rc == 2 && cli_one_line_from("difftx train: ") && cli_has("more than a row's"), "rc %d: %s", rc, cli_out);
    rc = cli("train --tokens %s --out %s --arch diff --dim 32 --layers 1 --heads 2 --vocab %d --ffn 64 --seq %d "
             "--steps 1 --recall-frac 0.5 --copy-frac 0.6",
             tokens_file(), test_path("recall_no.safetensors"), VOCAB, SEQ - 1);
    CHECKF(rc == 2 && cli_one_line_from("difftx train: ") && cli_has("more than 1"), "rc %d: %s", rc, cli_out);
}
