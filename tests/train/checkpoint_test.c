/* Training checkpoints (src/train/checkpoint.c): a saved and reloaded state
 * continues exactly as the original does, and every broken file is refused
 * with one line naming the file and what is wrong. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "io/safetensors.h"
#include "test.h"
#include "train/checkpoint.h"

static dtx_config small_config(void) {
    dtx_config c = dtx_config_default();
    c.dim = 16;
    c.n_layers = 2;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.vocab_size = 24; /* != dim: tok_embeddings is not square */
    c.ffn_dim = 32;
    c.max_seq_len = 8;
    c.tie_embeddings = 0;
    return c;
}

static dtx_optim_config small_optim(void) {
    dtx_optim_config o = dtx_optim_default();
    o.lr = 3e-3;
    o.min_lr = 1e-4;
    o.warmup_steps = 2;
    o.total_steps = 10;
    o.weight_decay = 0.05;
    o.clip_norm = 0.5;
    return o;
}

enum { B = 3, T = 8 };

/* A shard of pseudo-random ids for the sampler. */
static const char *data_shard(void) {
    static char path[512];
    if (path[0]) return path;
    int32_t toks[400];
    dtx_rng r;
    dtx_rng_seed(&r, 11);
    for (int i = 0; i < 400; i++) toks[i] = (int32_t)(dtx_rng_next(&r) % 24);
    const char *p = test_path("ckpt-data.bin");
    if (dtx_shard_write(p, toks, 400, 24) != DTX_OK) return NULL;
    snprintf(path, sizeof path, "%s", p);
    return path;
}

/* One training step on a batch drawn from rng. */
static int step(dtx_model *m, dtx_optimizer *opt, const dtx_shard *s, dtx_rng *rng) {
    int32_t in[B * T], tg[B * T];
    double loss;
    dtx_model_zero_grad(m);
    if (dtx_shard_sample_batch(s, rng, B, T, in, tg) != DTX_OK) return -1;
    if (dtx_model_forward(m, in, tg, B, T, NULL, &loss) != DTX_OK) return -1;
    if (dtx_model_backward(m, 1.0) != DTX_OK) return -1;
    return dtx_optimizer_step(opt, NULL, NULL) == DTX_OK ? 0 : -1;
}

static const char *const EXTRA_K[] = {"data_path", "batch"};
static const char *const EXTRA_V[] = {"some/where.bin", "3"};

/* A checkpoint after 3 steps, shared by the tests below. */
static const char *saved_checkpoint(void) {
    static char path[512];
    if (path[0]) return path;
    const char *data = data_shard();
    if (!data) return NULL;
    dtx_config c = small_config();
    dtx_optim_config o = small_optim();
    dtx_model *m = NULL;
    dtx_optimizer *opt = NULL;
    dtx_shard *s = NULL;
    dtx_rng rng;
    dtx_rng_seed(&rng, 5);
    const char *p = test_path("base.ckpt.safetensors");
    int ok = dtx_model_init(&m, &c, 3) == DTX_OK && dtx_optimizer_init(&opt, m, &o) == DTX_OK &&
             dtx_shard_open(&s, data, 24) == DTX_OK;
    for (int i = 0; ok && i < 3; i++) ok = step(m, opt, s, &rng) == 0;
    ok = ok && dtx_ckpt_save(p, m, opt, &rng, EXTRA_K, EXTRA_V, 2) == DTX_OK;
    dtx_shard_close(s);
    dtx_optimizer_free(opt);
    dtx_model_free(m);
    if (!ok) return NULL;
    snprintf(path, sizeof path, "%s", p);
    return path;
}

TEST(ckpt_round_trip_continues_bit_identically) {
    const char *data = data_shard();
    REQUIRE(data);
    dtx_config c = small_config();
    dtx_optim_config o = small_optim();
    dtx_model *m;
    dtx_optimizer *opt;
    dtx_shard *s;
    REQUIRE(dtx_model_init(&m, &c, 3) == DTX_OK);
    REQUIRE(dtx_optimizer_init(&opt, m, &o) == DTX_OK);
    REQUIRE(dtx_shard_open(&s, data, 24) == DTX_OK);
    dtx_rng rng;
    dtx_rng_seed(&rng, 5);
    for (int i = 0; i < 3; i++) REQUIRE(step(m, opt, s, &rng) == 0);
    const char *p1 = test_path("rt1.safetensors");
    REQUIRE(dtx_ckpt_save(p1, m, opt, &rng, EXTRA_K, EXTRA_V, 2) == DTX_OK);

    dtx_ckpt ck;
    REQUIRE(dtx_ckpt_load(&ck, p1) == DTX_OK);
    size_t n = dtx_model_num_params(m);
    REQUIRE(dtx_model_num_params(ck.model) == n);
    CHECK(ck.step == 3 && dtx_optimizer_steps_done(ck.opt) == 3);
    CHECK(memcmp(&ck.rng, &rng, sizeof rng) == 0);
    CHECK(memcmp(dtx_model_params(ck.model), dtx_model_params(m), n * sizeof(real)) == 0);
    CHECK(memcmp(dtx_optimizer_moment1(ck.opt), dtx_optimizer_moment1(opt), n * sizeof(real)) == 0);
    CHECK(memcmp(dtx_optimizer_moment2(ck.opt), dtx_optimizer_moment2(opt), n * sizeof(real)) == 0);
    /* the configs, compared field by field through their descriptions */
    const char *k1[DTX_CKPT_N_DESCRIBE], *k2[DTX_CKPT_N_DESCRIBE];
    char v1[DTX_CKPT_N_DESCRIBE][DTX_CKPT_VALUE_MAX], v2[DTX_CKPT_N_DESCRIBE][DTX_CKPT_VALUE_MAX];
    REQUIRE(dtx_ckpt_describe(&c, &o, k1, v1) == DTX_CKPT_N_DESCRIBE);
    REQUIRE(dtx_ckpt_describe(dtx_model_config(ck.model), dtx_optimizer_config(ck.opt), k2, v2) ==
            DTX_CKPT_N_DESCRIBE);
    for (int i = 0; i < DTX_CKPT_N_DESCRIBE; i++)
        CHECKF(strcmp(k1[i], k2[i]) == 0 && strcmp(v1[i], v2[i]) == 0, "%s: %s vs %s", k1[i], v1[i], v2[i]);
    CHECK(dtx_optimizer_config(ck.opt)->lr == o.lr && dtx_model_config(ck.model)->n_kv_heads == 1);
    const char *v = dtx_ckpt_meta(&ck, "data_path");
    CHECK(v && strcmp(v, "some/where.bin") == 0);
    v = dtx_ckpt_meta(&ck, "lr");
    CHECK(v && strtod(v, NULL) == o.lr);
    CHECK(dtx_ckpt_meta(&ck, "absent") == NULL);

    /* Two more steps from each: the same weights, bit for bit, and the
     * same checkpoint file, byte for byte. */
    for (int i = 0; i < 2; i++) {
        REQUIRE(step(m, opt, s, &rng) == 0);
        REQUIRE(step(ck.model, ck.opt, s, &ck.rng) == 0);
    }
    CHECK(memcmp(dtx_model_params(ck.model), dtx_model_params(m), n * sizeof(real)) == 0);
    const char *p2 = test_path("rt2.safetensors"), *p3 = test_path("rt3.safetensors");
    REQUIRE(dtx_ckpt_save(p2, m, opt, &rng, EXTRA_K, EXTRA_V, 2) == DTX_OK);
    REQUIRE(dtx_ckpt_save(p3, ck.model, ck.opt, &ck.rng, EXTRA_K, EXTRA_V, 2) == DTX_OK);
    CHECK(same_bytes(p2, p3));
    dtx_ckpt_free(&ck);
    dtx_shard_close(s);
    dtx_optimizer_free(opt);
    dtx_model_free(m);
}

/* Unknown metadata of a model file travels through a checkpoint (as
 * model_meta.<key>) and back into the model saved at the end. */
TEST(ckpt_keeps_model_metadata) {
    dtx_config c = small_config();
    dtx_model *m0;
    REQUIRE(dtx_model_init(&m0, &c, 3) == DTX_OK);
    const char *mp = test_path("plain.safetensors");
    REQUIRE(dtx_model_save(m0, mp, 0) == DTX_OK);
    dtx_model_free(m0);
    /* the same file with one more metadata key */
    dtx_st_file f;
    REQUIRE(dtx_st_open(&f, mp) == DTX_OK);
    const char *keys[32], *vals[32];
    int nk = 0;
    for (int i = 0; i < f.n_meta && nk < 31; i++, nk++) keys[nk] = f.meta_keys[i], vals[nk] = f.meta_values[i];
    keys[nk] = "trained_on";
    vals[nk++] = "the sotu corpus";
    dtx_st_out *ts = calloc((size_t)f.n_tensors, sizeof *ts);
    real **bufs = calloc((size_t)f.n_tensors, sizeof *bufs);
    REQUIRE(ts && bufs);
    for (int i = 0; i < f.n_tensors; i++) {
        bufs[i] = malloc((size_t)f.tensors[i].numel * sizeof(real));
        REQUIRE(bufs[i]);
        dtx_st_to_real(&f.tensors[i], bufs[i]);
        ts[i].name = f.tensors[i].name;
        ts[i].ndim = f.tensors[i].ndim;
        memcpy(ts[i].shape, f.tensors[i].shape, sizeof ts[i].shape);
        ts[i].data = bufs[i];
    }
    const char *mp2 = test_path("noted.safetensors");
    REQUIRE(dtx_st_write(mp2, ts, f.n_tensors, keys, vals, nk, 0) == DTX_OK);
    for (int i = 0; i < f.n_tensors; i++) free(bufs[i]);
    free(bufs);
    free(ts);
    dtx_st_close(&f);

    dtx_model *m;
    dtx_optimizer *opt;
    REQUIRE(dtx_model_load(&m, mp2) == DTX_OK);
    dtx_optim_config o = small_optim();
    REQUIRE(dtx_optimizer_init(&opt, m, &o) == DTX_OK);
    dtx_rng rng;
    dtx_rng_seed(&rng, 1);
    const char *cp = test_path("noted.ckpt.safetensors");
    REQUIRE(dtx_ckpt_save(cp, m, opt, &rng, NULL, NULL, 0) == DTX_OK);
    dtx_optimizer_free(opt);
    dtx_model_free(m);
    dtx_ckpt ck;
    REQUIRE(dtx_ckpt_load(&ck, cp) == DTX_OK);
    const char *v = dtx_ckpt_meta(&ck, "model_meta.trained_on");
    CHECK(v && strcmp(v, "the sotu corpus") == 0);
    const char *out = test_path("noted-again.safetensors");
    REQUIRE(dtx_model_save(ck.model, out, 0) == DTX_OK);
    CHECK(same_bytes(out, mp2));
    dtx_ckpt_free(&ck);
}

/* ------------------------------------------------------------ refusals */

typedef struct {
    const char *drop;       /* tensor to leave out                        */
    const char *add;        /* tensor to add (2 elements)                 */
    const char *transpose;  /* 2-d tensor whose shape is swapped          */
    int bf16;               /* store every tensor as BF16                 */
    const char *key;        /* metadata key to change ...                 */
    const char *value;      /* ... to this value; NULL removes it         */
} mutation;

/* The base checkpoint rewritten with one change. */
static const char *mutated(const char *name, mutation mu) {
    const char *src = saved_checkpoint();
    if (!src) return NULL;
    dtx_st_file f;
    if (dtx_st_open(&f, src) != DTX_OK) return NULL;
    int n = 0, nk = 0;
    dtx_st_out *ts = calloc((size_t)f.n_tensors + 1, sizeof *ts);
    real **bufs = calloc((size_t)f.n_tensors + 1, sizeof *bufs);
    const char **keys = calloc((size_t)f.n_meta + 1, sizeof *keys), **vals = calloc((size_t)f.n_meta + 1, sizeof *vals);
    static real two[2] = {1, 2};
    const char *path = NULL;
    if (!ts || !bufs || !keys || !vals) goto done;
    for (int i = 0; i < f.n_tensors; i++) {
        const dtx_st_tensor *t = &f.tensors[i];
        if (mu.drop && strcmp(t->name, mu.drop) == 0) continue;
        bufs[n] = malloc((size_t)t->numel * sizeof(real));
        if (!bufs[n]) goto done;
        dtx_st_to_real(t, bufs[n]);
        ts[n].name = t->name;
        ts[n].ndim = t->ndim;
        memcpy(ts[n].shape, t->shape, sizeof ts[n].shape);
        if (mu.transpose && strcmp(t->name, mu.transpose) == 0) {
            ts[n].shape[0] = t->shape[1];
            ts[n].shape[1] = t->shape[0];
        }
        ts[n].data = bufs[n];
        n++;
    }
    if (mu.add) {
        ts[n].name = mu.add;
        ts[n].ndim = 1;
        ts[n].shape[0] = 2;
        ts[n].data = two;
        n++;
    }
    int seen = 0;
    for (int i = 0; i < f.n_meta; i++) {
        if (mu.key && strcmp(f.meta_keys[i], mu.key) == 0) {
            seen = 1;
            if (!mu.value) continue;
            keys[nk] = f.meta_keys[i];
            vals[nk++] = mu.value;
            continue;
        }
        keys[nk] = f.meta_keys[i];
        vals[nk++] = f.meta_values[i];
    }
    if (mu.key && !seen) goto done;
    path = test_path(name);
    if (dtx_st_write(path, ts, n, keys, vals, nk, mu.bf16) != DTX_OK) path = NULL;
done:
    for (int i = 0; bufs && i < n; i++)
        if (ts[i].data != two) free(bufs[i]);
    free(bufs);
    free(ts);
    free(keys);
    free(vals);
    dtx_st_close(&f);
    return path;
}

#define CHECK_LOAD_FAILS(path, want_st, s1, s2)                                                              \
    do {                                                                                                     \
        const char *p_ = (path);                                                                             \
        REQUIRE(p_);                                                                                         \
        dtx_ckpt ck_;                                                                                        \
        dtx_status st_ = dtx_ckpt_load(&ck_, p_);                                                            \
        const char *e_ = dtx_last_error();                                                                   \
        CHECKF(st_ == (want_st), "%s: status %d, want %d (%s)", p_, (int)st_, (int)(want_st), e_);           \
        CHECKF(strncmp(e_, p_, strlen(p_)) == 0 && strstr(e_, s1) && strstr(e_, s2) && !strchr(e_, '\n'),   \
               "%s: want '%s' and '%s' in: %s", p_, s1, s2, e_);                                             \
        CHECK(ck_.model == NULL && ck_.opt == NULL && ck_.n_meta == 0);                                      \
        dtx_ckpt_free(&ck_);                                                                                 \
    } while (0)

TEST(ckpt_refuses_broken_tensors) {
    REQUIRE(saved_checkpoint());
    dtx_ckpt ok;
    REQUIRE(dtx_ckpt_load(&ok, saved_checkpoint()) == DTX_OK);
    dtx_ckpt_free(&ok);
    CHECK_LOAD_FAILS(mutated("no-v.safetensors", (mutation){.drop = "optim.v.norm.weight"}), DTX_ERR_FORMAT,
                     "missing tensor 'optim.v.norm.weight'", "diff");
    CHECK_LOAD_FAILS(mutated("no-m.safetensors", (mutation){.drop = "optim.m.layers.1.feed_forward.w2.weight"}),
                     DTX_ERR_FORMAT, "missing tensor 'optim.m.layers.1.feed_forward.w2.weight'", "");
    CHECK_LOAD_FAILS(mutated("no-w.safetensors", (mutation){.drop = "output.weight"}), DTX_ERR_FORMAT,
                     "missing tensor 'output.weight'", "");
    CHECK_LOAD_FAILS(mutated("extra.safetensors", (mutation){.add = "optim.x"}), DTX_ERR_FORMAT,
                     "unexpected tensor 'optim.x'", "tie_embeddings=false");
    CHECK_LOAD_FAILS(mutated("extra-m.safetensors", (mutation){.add = "optim.m.bogus"}), DTX_ERR_FORMAT,
                     "unexpected tensor 'optim.m.bogus'", "");
    CHECK_LOAD_FAILS(mutated("shape.safetensors", (mutation){.transpose = "optim.m.tok_embeddings.weight"}),
                     DTX_ERR_FORMAT, "tensor 'optim.m.tok_embeddings.weight' has shape [16, 24]",
                     "the config needs [24, 16]");
    CHECK_LOAD_FAILS(mutated("bf16.safetensors", (mutation){.bf16 = 1}), DTX_ERR_FORMAT, "is not F32", "tensor '");
}

TEST(ckpt_refuses_broken_metadata) {
    REQUIRE(saved_checkpoint());
    struct {
        const char *key, *value, *s1, *s2;
        dtx_status st;
    } cases[] = {
        {"checkpoint_version", NULL, "not a checkpoint", "checkpoint_version", DTX_ERR_FORMAT},
        {"checkpoint_version", "2", "checkpoint_version '2'", "knows 1", DTX_ERR_FORMAT},
        {"step", NULL, "missing metadata key 'step'", "", DTX_ERR_FORMAT},
        {"step", "-1", "'step' = '-1'", "[0, 10]", DTX_ERR_FORMAT},
        {"step", "11", "'step' = '11'", "[0, 10]", DTX_ERR_FORMAT},
        {"step", "3x", "'step' = '3x'", "integer", DTX_ERR_FORMAT},
        {"rng", "12", "'rng' = '12'", "hex", DTX_ERR_FORMAT},
        {"rng", "0000000000000000 0000000000000000 0000000000000000 0000000000000000", "'rng'", "non-zero",
         DTX_ERR_FORMAT},
        {"rng", "000000000000000g 0000000000000001 0000000000000000 0000000000000000", "'rng'", "hex",
         DTX_ERR_FORMAT},
        {"rng", NULL, "missing metadata key 'rng'", "", DTX_ERR_FORMAT},
        {"lr", "fast", "'lr' = 'fast'", "not a number", DTX_ERR_FORMAT},
        {"lr", "-1", "metadata: lr = -1", "positive", DTX_ERR_FORMAT},
        {"beta2", NULL, "missing metadata key 'beta2'", "", DTX_ERR_FORMAT},
        {"schedule", "sqrt", "'schedule' = 'sqrt'", "'cosine', 'linear' or 'constant'", DTX_ERR_FORMAT},
        {"decay_embeddings", "yes", "'decay_embeddings' = 'yes'", "'false' or 'true'", DTX_ERR_FORMAT},
        {"arch", "mamba", "'arch' = 'mamba'", "'diff', 'transformer' or 'diff2'", DTX_ERR_FORMAT},
        {"dim", "0", "'dim' = '0'", "integer", DTX_ERR_FORMAT},
        {"n_heads", "3", "metadata: ", "n_heads = 3", DTX_ERR_FORMAT},
        {"format", "other", "'format' = 'other'", "difftx", DTX_ERR_FORMAT},
        /* a config that disagrees with the tensors */
        {"vocab_size", "25", "has shape [24, 16]", "needs [25, 16]", DTX_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "meta%zu.safetensors", i);
        CHECK_LOAD_FAILS(mutated(name, (mutation){.key = cases[i].key, .value = cases[i].value}), cases[i].st,
                         cases[i].s1, cases[i].s2);
    }
    /* a model file is not a checkpoint */
    dtx_config c = small_config();
    dtx_model *m;
    REQUIRE(dtx_model_init(&m, &c, 1) == DTX_OK);
    const char *mp = test_path("a-model.safetensors");
    REQUIRE(dtx_model_save(m, mp, 0) == DTX_OK);
    dtx_model_free(m);
    CHECK_LOAD_FAILS(mp, DTX_ERR_FORMAT, "not a checkpoint", "a model file?");
    CHECK_LOAD_FAILS(test_path("absent.safetensors"), DTX_ERR_IO, "absent.safetensors", "No such file");
    /* and a checkpoint is not a model file */
    CHECK(dtx_model_load(&m, saved_checkpoint()) == DTX_ERR_FORMAT && strstr(dtx_last_error(), "unexpected tensor"));
}

TEST(ckpt_save_reports_failures) {
    dtx_config c = small_config();
    dtx_optim_config o = small_optim();
    dtx_model *m;
    dtx_optimizer *opt;
    REQUIRE(dtx_model_init(&m, &c, 3) == DTX_OK);
    REQUIRE(dtx_optimizer_init(&opt, m, &o) == DTX_OK);
    dtx_rng rng;
    dtx_rng_seed(&rng, 1);
    const char *file = test_path("a-file");
    REQUIRE(write_file(file, "x", 1) == 0);
    char bad[600];
    snprintf(bad, sizeof bad, "%s/sub/ckpt.safetensors", file);
    CHECK(dtx_ckpt_save(bad, m, opt, &rng, NULL, NULL, 0) == DTX_ERR_IO);
    CHECKF(strncmp(dtx_last_error(), bad, strlen(bad)) == 0 && strstr(dtx_last_error(), "Not a directory"), "%s",
           dtx_last_error());
    const char *k[] = {"step"}, *v[] = {"9"};
    const char *p = test_path("dup.safetensors");
    CHECK(dtx_ckpt_save(p, m, opt, &rng, k, v, 1) == DTX_ERR_ARG && strstr(dtx_last_error(), "'step' is given twice"));
    CHECK(access(p, F_OK) != 0);
    dtx_optimizer_free(opt);
    dtx_model_free(m);
}
