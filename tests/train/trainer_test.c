/* src/train/trainer.c: a run stopped after some steps and resumed from its
 * checkpoint ends with the same weights, bit for bit, as one that never
 * stopped; a stop between micro-batches changes nothing and the step then
 * runs as if it had not been tried; a non-finite loss updates nothing;
 * validation is repeatable and leaves the sampler alone; two ranks (local
 * threads) train the model one rank does, to the order of their sums; the
 * refusals. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "train/checkpoint.h"
#include "train/optim.h"
#include "train/trainer.h"

enum { V = 61, SEQ = 12, BATCH = 2, ACCUM = 2, N_IDS = 3000 };

static const char *ids_path(void) {
    static char path[512];
    if (!path[0]) {
        int32_t *ids = malloc(sizeof(int32_t) * N_IDS);
        for (int i = 0; i < N_IDS; i++) ids[i] = (int32_t)((i * 7 + i / 13) % V);
        snprintf(path, sizeof path, "%s", test_path("trainer.bin"));
        if (dtx_shard_write(path, ids, N_IDS, V) != DTX_OK) path[0] = 0;
        free(ids);
    }
    return path;
}

static dtx_train_options opts(void) {
    dtx_train_options o = {.batch = BATCH, .seq = SEQ, .accum = ACCUM, .eval_batches = 3, .seed = 17, .mix = {.needle_max = 1}};
    return o;
}

static dtx_config cfg(void) { return test_config(DTX_ARCH_DIFF, 32, 2, 2, 2, V, 64, SEQ, 1); }

static int start_bucketed(dtx_trainer *t, const dtx_train_options *o, dtx_comm *comm, int zero1, size_t bucket) {
    dtx_config c = cfg();
    dtx_optim_config oc = dtx_optim_default();
    oc.lr = 3e-3, oc.warmup_steps = 2, oc.total_steps = 8;
    return dtx_trainer_open(t, o, ids_path(), ids_path(), V) == DTX_OK &&
           dtx_trainer_set_comm(t, comm, zero1, bucket) == DTX_OK &&
           dtx_trainer_start(t, NULL, &c, DTX_INIT_TORCH, &oc) == DTX_OK;
}

static int start_with(dtx_trainer *t, const dtx_train_options *o, dtx_comm *comm, int zero1) {
    return start_bucketed(t, o, comm, zero1, 0);
}

static int start(dtx_trainer *t, const dtx_train_options *o) { return start_with(t, o, NULL, 0); }

static int run_steps(dtx_trainer *t, int n) {
    for (int i = 0; i < n; i++) {
        dtx_step_stats s;
        if (dtx_trainer_step(t, &s) != DTX_STEP_DONE || !isfinite(s.loss) || !isfinite(s.grad_norm)) return 0;
    }
    return 1;
}

static int same_params(dtx_model *a, dtx_model *b) {
    size_t n = dtx_model_num_params(a);
    return n == dtx_model_num_params(b) && memcmp(dtx_model_params(a), dtx_model_params(b), n * sizeof(dtx_real)) == 0;
}

/* A trainer opened on the test's data and resumed from checkpoint path, which holds `step` steps. */
static int resume_from(dtx_trainer *t, const dtx_train_options *o, const char *path, int64_t step) {
    dtx_ckpt k;
    if (dtx_ckpt_load(&k, path) != DTX_OK || k.step != step) return 0;
    int ok = dtx_trainer_open(t, o, ids_path(), ids_path(), V) == DTX_OK &&
             dtx_trainer_resume(t, k.model, k.opt, &k.rng, k.step) == DTX_OK;
    k.model = NULL, k.opt = NULL; /* taken, freed or not */
    dtx_ckpt_free(&k);
    return ok;
}

TEST(trainer_resume_is_exact) {
    dtx_train_options o = opts();
    dtx_trainer a, b, c;
    REQUIRE(start(&a, &o) && run_steps(&a, 6) && a.step == 6);
    REQUIRE(start(&b, &o) && run_steps(&b, 3));
    const char *ck = test_path("trainer_ck.safetensors");
    REQUIRE(dtx_ckpt_save(ck, b.model, b.opt, &b.rng, NULL, NULL, 0) == DTX_OK);
    dtx_trainer_close(&b);
    REQUIRE(resume_from(&c, &o, ck, 3));
    REQUIRE(run_steps(&c, 3) && c.step == 6);
    CHECK(same_params(a.model, c.model));
    CHECK(memcmp(&a.rng, &c.rng, sizeof a.rng) == 0);
    dtx_trainer_close(&a), dtx_trainer_close(&c);
}

TEST(trainer_stop_between_micro_batches_changes_nothing) {
    dtx_train_options o = opts();
    dtx_trainer a, b;
    REQUIRE(start(&a, &o) && start(&b, &o));
    REQUIRE(run_steps(&a, 2) && run_steps(&b, 2));
    volatile sig_atomic_t stop = 1;
    b.o.stop = &stop;
    dtx_rng before = b.rng;
    dtx_step_stats s;
    CHECK(dtx_trainer_step(&b, &s) == DTX_STEP_INTERRUPTED);  /* after the first of ACCUM micro-batches */
    CHECK(b.step == 2 && memcmp(&before, &b.rng, sizeof before) == 0 && same_params(a.model, b.model));
    double v;
    CHECK(dtx_trainer_evaluate(&b, &v) == DTX_STEP_INTERRUPTED);
    stop = 0;
    REQUIRE(run_steps(&a, 2) && run_steps(&b, 2));
    CHECK(same_params(a.model, b.model));
    dtx_trainer_close(&a), dtx_trainer_close(&b);
}

TEST(trainer_nonfinite_loss_updates_nothing) {
    dtx_train_options o = opts();
    o.debug_nan_at = 2;
    dtx_trainer t, ref;
    REQUIRE(start(&t, &o) && start(&ref, &o) && run_steps(&t, 1) && run_steps(&ref, 1));
    dtx_step_stats s;
    CHECK(dtx_trainer_step(&t, &s) == DTX_STEP_LOSS_NONFINITE && isnan(s.loss) && t.step == 1);
    CHECK(same_params(t.model, ref.model));
    dtx_trainer_close(&t), dtx_trainer_close(&ref);
}

TEST(trainer_validation_is_repeatable) {
    dtx_train_options o = opts();
    dtx_trainer t;
    REQUIRE(start(&t, &o) && run_steps(&t, 1));
    dtx_rng before = t.rng;
    double v1, v2;
    CHECK(dtx_trainer_evaluate(&t, &v1) == DTX_STEP_DONE && dtx_trainer_evaluate(&t, &v2) == DTX_STEP_DONE);
    CHECK(isfinite(v1) && v1 == v2 && memcmp(&before, &t.rng, sizeof before) == 0);
    dtx_trainer_close(&t);
}

TEST(trainer_refusals) {
    dtx_train_options o = opts();
    dtx_trainer t;
    dtx_step_stats s;
    double v;
    /* no model yet */
    REQUIRE(dtx_trainer_open(&t, &o, ids_path(), NULL, V) == DTX_OK);
    CHECK(dtx_trainer_step(&t, &s) == DTX_STEP_ERROR && strstr(dtx_last_error(), "no model"));
    dtx_config c = cfg();
    dtx_optim_config oc = dtx_optim_default();
    REQUIRE(dtx_trainer_start(&t, NULL, &c, DTX_INIT_TORCH, &oc) == DTX_OK);
    CHECK(dtx_trainer_evaluate(&t, &v) == DTX_STEP_ERROR && strstr(dtx_last_error(), "no validation tokens"));
    dtx_trainer_close(&t);
    /* a stream shorter than one sequence: which one */
    const char *tiny = test_path("trainer_tiny.bin");
    int32_t few[5] = {1, 2, 3, 4, 5};
    REQUIRE(dtx_shard_write(tiny, few, 5, V) == DTX_OK);
    CHECK(dtx_trainer_open(&t, &o, tiny, NULL, V) == DTX_ERR_ARG &&
          strstr(dtx_last_error(), "(the training tokens) holds 5 tokens"));
    dtx_trainer_close(&t);
    CHECK(dtx_trainer_open(&t, &o, ids_path(), tiny, V) == DTX_ERR_ARG &&
          strstr(dtx_last_error(), "(the validation tokens) holds 5 tokens"));
    dtx_trainer_close(&t);
    /* an id past the vocabulary; a zero batch */
    CHECK(dtx_trainer_open(&t, &o, ids_path(), NULL, 40) != DTX_OK);
    dtx_trainer_close(&t);
    o.batch = 0;
    CHECK(dtx_trainer_open(&t, &o, ids_path(), NULL, V) == DTX_ERR_ARG);
    dtx_trainer_close(&t);
}

/* Two local ranks against one: the same losses, induction-score rows and
 * weights up to the order of the sums; both ranks hold the same bits. */
enum { STEPS = 4 };
typedef struct {
    dtx_trainer t;
    dtx_comm *comm;
    double loss[STEPS], gnorm[STEPS], val, grad_sum_s;
    int64_t copy_rows[STEPS];
    int ok;
    const char *ckpt; /* written (collectively) after ckpt_at steps */
    int ckpt_at;
} rank_run;

static void *rank_main(void *arg) {
    rank_run *r = arg;
    r->ok = 1;
    for (int i = 0; i < STEPS && r->ok; i++) {
        if (r->ckpt && i == r->ckpt_at) r->ok = dtx_trainer_checkpoint(&r->t, r->ckpt, NULL, NULL, 0) == DTX_OK;
        dtx_step_stats s;
        r->ok = dtx_trainer_step(&r->t, &s) == DTX_STEP_DONE;
        r->loss[i] = s.loss, r->gnorm[i] = s.grad_norm, r->copy_rows[i] = s.copy.rows;
        r->grad_sum_s += s.grad_sum_s;
    }
    r->ok = r->ok && dtx_trainer_evaluate(&r->t, &r->val) == DTX_STEP_DONE;
    return NULL;
}

static double max_rel_diff(dtx_model *a, dtx_model *b) {
    const dtx_real *x = dtx_model_params(a), *y = dtx_model_params(b);
    double d = 0, m = 0;
    for (size_t i = 0; i < dtx_model_num_params(a); i++) d = fmax(d, fabs((double)x[i] - y[i])), m = fmax(m, fabs((double)x[i]));
    return d / m;
}

TEST(trainer_two_ranks_train_what_one_does) {
    dtx_train_options o = opts();
    o.batch = 4, o.mix.copy_frac = 0.5; /* copy rows: the mixture is applied to the global rows */
    static rank_run one, two[2];
    REQUIRE(start(&one.t, &o));
    rank_main(&one);
    REQUIRE(one.ok);
    dtx_comm *c[2];
    REQUIRE(dtx_comm_local_create(2, c) == DTX_OK);
    CHECK(dtx_comm_rank(c[1]) == 1 && dtx_comm_size(c[0]) == 2 && dtx_comm_size(NULL) == 1);
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        REQUIRE(start_with(&two[r].t, &o, c[r], 0));
        REQUIRE(pthread_create(&th[r], NULL, rank_main, &two[r]) == 0);
    }
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    REQUIRE(two[0].ok && two[1].ok);
    int64_t rows = 0;
    for (int i = 0; i < STEPS; i++) {
        CHECKF(fabs(two[0].loss[i] - one.loss[i]) < 1e-5 * one.loss[i], "step %d: loss %.9g vs one rank %.9g", i + 1,
               two[0].loss[i], one.loss[i]);
        CHECKF(fabs(two[0].gnorm[i] - one.gnorm[i]) < 1e-5 * one.gnorm[i], "step %d: gradient norm %.9g vs %.9g",
               i + 1, two[0].gnorm[i], one.gnorm[i]); /* AdamW hides a gradient's scale; the norm does not */
        CHECK(two[0].loss[i] == two[1].loss[i] && two[0].copy_rows[i] == one.copy_rows[i]);
        rows += one.copy_rows[i];
    }
    CHECK(rows > 0);
    CHECK(fabs(two[0].val - one.val) < 1e-5 * one.val && two[0].val == two[1].val);
    double d = max_rel_diff(one.t.model, two[0].t.model);
    CHECKF(d < 1e-4, "weights after %d steps: %.3g from one rank's", STEPS, d);
    CHECK(max_rel_diff(two[0].t.model, two[1].t.model) == 0);
    /* a batch that does not divide */
    dtx_trainer odd;
    o.batch = 3;
    REQUIRE(dtx_trainer_open(&odd, &o, ids_path(), NULL, V) == DTX_OK);
    CHECK(dtx_trainer_set_comm(&odd, c[0], 0, 0) == DTX_ERR_USAGE &&
          strstr(dtx_last_error(), "batch 3 does not divide over 2 ranks"));
    dtx_trainer_close(&odd);
    dtx_trainer_close(&one.t), dtx_trainer_close(&two[0].t), dtx_trainer_close(&two[1].t);
    dtx_comm_local_free(c, 2);
}

/* ZeRO-1 over two local ranks: plain data parallelism's losses and weights
 * (to the order of the gradient norm's sum), half the moments on each rank,
 * and a checkpoint that holds the whole optimizer: one rank resuming from it
 * ends where the sharded run does. */
TEST(trainer_zero1_is_data_parallelism) {
    dtx_train_options o = opts();
    o.batch = 4;
    static rank_run plain[2], z[2];
    dtx_comm *cp[2], *cz[2];
    REQUIRE(dtx_comm_local_create(2, cp) == DTX_OK && dtx_comm_local_create(2, cz) == DTX_OK);
    const char *ck = test_path("zero1.safetensors");
    pthread_t th[4];
    for (int r = 0; r < 2; r++) {
        REQUIRE(start_with(&plain[r].t, &o, cp[r], 0) && start_with(&z[r].t, &o, cz[r], 1));
        z[r].ckpt = ck, z[r].ckpt_at = 2;
        REQUIRE(pthread_create(&th[r], NULL, rank_main, &plain[r]) == 0);
        REQUIRE(pthread_create(&th[2 + r], NULL, rank_main, &z[r]) == 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    REQUIRE(plain[0].ok && plain[1].ok && z[0].ok && z[1].ok);
    for (int i = 0; i < STEPS; i++)
        CHECKF(fabs(z[0].loss[i] - plain[0].loss[i]) <= 1e-6 * plain[0].loss[i], "step %d: %.9g vs %.9g", i + 1,
               z[0].loss[i], plain[0].loss[i]);
    CHECK(max_rel_diff(plain[0].t.model, z[0].t.model) < 1e-5 && max_rel_diff(z[0].t.model, z[1].t.model) == 0);
    size_t lo0, hi0 = dtx_optimizer_shard(z[0].t.opt, &lo0), lo1, hi1 = dtx_optimizer_shard(z[1].t.opt, &lo1);
    CHECK(lo0 == 0 && hi0 == lo1 && hi1 == dtx_model_num_params(z[0].t.model) && hi0 > 0 && hi0 < hi1);
    /* one rank from the sharded run's checkpoint (after 2 steps) to its end */
    dtx_trainer one;
    REQUIRE(resume_from(&one, &o, ck, 2));
    REQUIRE(run_steps(&one, STEPS - 2));
    double d = max_rel_diff(one.model, z[0].t.model);
    CHECKF(d < 1e-4, "resumed on one rank: %.3g from the sharded run", d);
    dtx_trainer_close(&one);
    for (int r = 0; r < 2; r++) dtx_trainer_close(&plain[r].t), dtx_trainer_close(&z[r].t);
    dtx_comm_local_free(cp, 2), dtx_comm_local_free(cz, 2);
}

/* The gradient summed in buckets while the backward runs (on each rank's
 * thread of sums) against one sum after it: the same bits, plain and
 * ZeRO-1, from buckets of one layer's range each (1 value) to a few. */
TEST(trainer_gradient_buckets_change_nothing) {
    static const size_t BUCKETS[] = {1, 15000};
    for (int zero1 = 0; zero1 < 2; zero1++)
        for (size_t b = 0; b < sizeof BUCKETS / sizeof BUCKETS[0]; b++) {
            dtx_train_options o = opts();
            o.batch = 4;
            static rank_run once[2], buck[2];
            memset(once, 0, sizeof once), memset(buck, 0, sizeof buck);
            dtx_comm *c1[2], *c2[2];
            REQUIRE(dtx_comm_local_create(2, c1) == DTX_OK && dtx_comm_local_create(2, c2) == DTX_OK);
            pthread_t th[4];
            for (int r = 0; r < 2; r++) {
                REQUIRE(start_with(&once[r].t, &o, c1[r], zero1) &&
                        start_bucketed(&buck[r].t, &o, c2[r], zero1, BUCKETS[b]));
                REQUIRE(pthread_create(&th[r], NULL, rank_main, &once[r]) == 0);
                REQUIRE(pthread_create(&th[2 + r], NULL, rank_main, &buck[r]) == 0);
            }
            for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
            REQUIRE(once[0].ok && once[1].ok && buck[0].ok && buck[1].ok);
            for (int i = 0; i < STEPS; i++)
                CHECKF(buck[0].loss[i] == once[0].loss[i] && buck[0].gnorm[i] == once[0].gnorm[i],
                       "zero1 %d, bucket %zu, step %d: loss %.9g vs %.9g", zero1, BUCKETS[b], i + 1, buck[0].loss[i],
                       once[0].loss[i]);
            CHECKF(max_rel_diff(once[0].t.model, buck[0].t.model) == 0 &&
                   max_rel_diff(buck[0].t.model, buck[1].t.model) == 0, "zero1 %d, bucket %zu: weights differ", zero1,
                   BUCKETS[b]);
            CHECK(buck[0].grad_sum_s > 0 && once[0].grad_sum_s > 0);
            for (int r = 0; r < 2; r++) dtx_trainer_close(&once[r].t), dtx_trainer_close(&buck[r].t);
            dtx_comm_local_free(c1, 2), dtx_comm_local_free(c2, 2);
        }
}

/* ---- the public trainer (difftx.h): the same loop behind an opaque handle */

static dtx_train_options public_opts(void) {
    dtx_train_options o = dtx_train_options_default();
    o.batch = BATCH, o.seq = SEQ, o.accum = ACCUM, o.eval_batches = 3, o.seed = 17;
    return o;
}

static dtx_optim_config public_optim(void) {
    dtx_optim_config oc = dtx_optim_default();
    oc.lr = 3e-3, oc.warmup_steps = 2, oc.total_steps = 8;
    return oc;
}

static int public_steps(dtx_trainer *t, int n) {
    for (int i = 0; i < n; i++) {
        dtx_train_stats s;
        int64_t before = dtx_trainer_steps_done(t);
        if (dtx_trainer_update(t, &s) != DTX_OK || s.step != before + 1 || !isfinite(s.loss) ||
            !isfinite(s.grad_norm) || !(s.lr > 0))
            return 0;
    }
    return 1;
}

TEST(trainer_public_api_is_the_internal_loop) {
    dtx_train_options io = opts();
    io.mix.needle_max = 6;
    dtx_trainer inner;
    REQUIRE(start(&inner, &io) && run_steps(&inner, 4));
    dtx_train_options o = public_opts();
    dtx_config c = cfg();
    dtx_optim_config oc = public_optim();
    dtx_trainer *t = NULL;
    REQUIRE(dtx_trainer_init(&t, &o, ids_path(), ids_path(), &c, NULL, &oc) == DTX_OK);
    REQUIRE(public_steps(t, 4) && dtx_trainer_steps_done(t) == 4);
    CHECK(same_params(inner.model, dtx_trainer_model(t)));
    double v1, v2;
    CHECK(dtx_trainer_evaluate(&inner, &v1) == DTX_STEP_DONE && dtx_trainer_eval(t, &v2) == DTX_OK && v1 == v2);
    dtx_trainer_close(&inner);
    dtx_trainer_free(t);
}

TEST(trainer_public_resume_is_exact) {
    dtx_train_options o = public_opts();
    dtx_config c = cfg();
    dtx_optim_config oc = public_optim();
    dtx_trainer *a = NULL, *b = NULL, *r = NULL;
    REQUIRE(dtx_trainer_init(&a, &o, ids_path(), NULL, &c, NULL, &oc) == DTX_OK && public_steps(a, 6));
    REQUIRE(dtx_trainer_init(&b, &o, ids_path(), NULL, &c, NULL, &oc) == DTX_OK && public_steps(b, 3));
    const char *ck = test_path("trainer_public_ck.safetensors");
    REQUIRE(dtx_trainer_save(b, ck) == DTX_OK);
    dtx_trainer_free(b);
    REQUIRE(dtx_trainer_init_checkpoint(&r, &o, ids_path(), NULL, ck, NULL, &oc) == DTX_OK);
    CHECK(dtx_trainer_steps_done(r) == 3);
    REQUIRE(public_steps(r, 3));
    CHECK(same_params(dtx_trainer_model(a), dtx_trainer_model(r)));
    dtx_trainer_free(r);
    /* the internal resume (difftx train's) reads the public checkpoint too */
    dtx_train_options io = opts();
    dtx_trainer inner;
    REQUIRE(resume_from(&inner, &io, ck, 3) && run_steps(&inner, 3));
    CHECK(same_params(dtx_trainer_model(a), inner.model));
    dtx_trainer_close(&inner);
    /* other settings or other tokens: refused, naming what differs */
    o.batch = 4;
    CHECK(dtx_trainer_init_checkpoint(&r, &o, ids_path(), NULL, ck, NULL, NULL) == DTX_ERR_USAGE && !r &&
          strstr(dtx_last_error(), "batch is 2 in the checkpoint and 4 here"));
    const char *key, *here, *there;
    dtx_trainer_mismatch(&key, &here, &there);
    CHECK(key && strcmp(key, "batch") == 0 && strcmp(here, "4") == 0 && strcmp(there, "2") == 0);
    o = public_opts(), o.seed = 18;
    CHECK(dtx_trainer_init_checkpoint(&r, &o, ids_path(), NULL, ck, NULL, NULL) == DTX_ERR_USAGE &&
          strstr(dtx_last_error(), "seed"));
    /* the model's config, the precision and the mixture are settings too */
    o = public_opts();
    dtx_config other_c = c;
    other_c.subln = DTX_SUBLN_NONE;
    CHECK(dtx_trainer_init_checkpoint(&r, &o, ids_path(), NULL, ck, &other_c, NULL) == DTX_ERR_USAGE &&
          (dtx_trainer_mismatch(&key, &here, &there), key && strcmp(key, "subln") == 0));
    o.precision = DTX_PREC_BF16;
    CHECK(dtx_trainer_init_checkpoint(&r, &o, ids_path(), NULL, ck, NULL, NULL) == DTX_ERR_USAGE &&
          (dtx_trainer_mismatch(&key, &here, &there), key && strcmp(key, "precision") == 0 &&
           strcmp(here, "bf16") == 0 && strcmp(there, "fp32") == 0));
    o = public_opts(), o.mix.copy_frac = 0.5;
    CHECK(dtx_trainer_init_checkpoint(&r, &o, ids_path(), NULL, ck, NULL, NULL) == DTX_ERR_USAGE &&
          (dtx_trainer_mismatch(&key, &here, &there), key && strcmp(key, "needles") == 0));
    o = public_opts();
    REQUIRE(dtx_trainer_init_checkpoint(&r, &o, ids_path(), NULL, ck, &c, NULL) == DTX_OK);
    dtx_trainer_mismatch(&key, &here, &there);
    CHECK(!key && !here && !there);
    dtx_train_info info;
    dtx_trainer_info(r, &info);
    CHECK(info.start_step == 3 && isfinite(info.start_loss) && info.ckpt_threads > 0 && info.extended_from == 0 &&
          info.ranks == 1 && info.rank == 0 && info.data_tokens > 0 && info.val_tokens == 0);
    dtx_trainer_free(r);
    /* fewer steps than the checkpoint's schedule: refused; more: the run is extended (a warm restart at step 3),
     * as difftx train --resume does */
    o = public_opts();
    dtx_optim_config shorter = oc, longer = oc;
    shorter.total_steps = 7;
    CHECK(dtx_trainer_init_checkpoint(&r, &o, ids_path(), NULL, ck, NULL, &shorter) == DTX_ERR_USAGE && !r &&
          strstr(dtx_last_error(), "total_steps is 8 in the checkpoint and 7 here"));
    longer.total_steps = 40;
    REQUIRE(dtx_trainer_init_checkpoint(&r, &o, ids_path(), NULL, ck, NULL, &longer) == DTX_OK);
    dtx_trainer_info(r, &info);
    CHECK(info.extended_from == 8 && info.restart_lr == dtx_lr_at(&oc, 3));
    dtx_train_stats st;
    REQUIRE(dtx_trainer_update(r, &st) == DTX_OK);
    dtx_optim_config restarted = longer; /* the rate of step 3 after the restart: up from the rate there */
    restarted.restart_step = 3, restarted.restart_lr = dtx_lr_at(&oc, 3);
    CHECKF(st.step == 4 && fabs(st.lr - dtx_lr_at(&restarted, 3)) < 1e-15 && st.lr > dtx_lr_at(&oc, 3),
           "lr %g, want %g (rising from %g)", st.lr, dtx_lr_at(&restarted, 3), dtx_lr_at(&oc, 3));
    dtx_trainer_free(r);
    o = public_opts();
    const char *other = test_path("trainer_other.bin");
    int32_t ids[400];
    for (int i = 0; i < 400; i++) ids[i] = (int32_t)(i % V);
    REQUIRE(dtx_shard_write(other, ids, 400, V) == DTX_OK);
    CHECK(dtx_trainer_init_checkpoint(&r, &o, other, NULL, ck, NULL, NULL) == DTX_ERR_USAGE &&
          strstr(dtx_last_error(), "data_tokens") && strstr(dtx_last_error(), "training tokens"));
    const char *none = test_path("trainer_none.safetensors");
    CHECK(dtx_trainer_init_checkpoint(&r, &o, ids_path(), NULL, none, NULL, NULL) == DTX_ERR_IO &&
          !r);
    dtx_trainer_free(a);
}

TEST(trainer_public_nonfinite_and_refusals) {
    dtx_train_options o = public_opts();
    dtx_config c = cfg();
    dtx_optim_config oc = public_optim();
    dtx_trainer *t = NULL;
    REQUIRE(dtx_trainer_init(&t, &o, ids_path(), NULL, &c, NULL, &oc) == DTX_OK && public_steps(t, 1));
    /* a NaN weight: the step is refused as numeric, nothing counted */
    dtx_model *m = dtx_trainer_model(t);
    dtx_model_params(m)[dtx_model_find(m, "norm.weight")->offset] = NAN;
    dtx_train_stats s;
    CHECK(dtx_trainer_update(t, &s) == DTX_ERR_NUMERIC && strstr(dtx_last_error(), "step 2: the loss is not finite") &&
          dtx_trainer_steps_done(t) == 1);
    double v;
    CHECK(dtx_trainer_eval(t, &v) == DTX_ERR_ARG && strstr(dtx_last_error(), "no validation tokens"));
    /* the model handed out: the trainer cannot step or save */
    dtx_model *taken = dtx_trainer_take_model(t);
    CHECK(taken == m && dtx_trainer_model(t) == NULL);
    CHECK(dtx_trainer_update(t, NULL) == DTX_ERR_ARG && strstr(dtx_last_error(), "no model"));
    CHECK(dtx_trainer_save(t, test_path("trainer_taken.safetensors")) == DTX_ERR_ARG);
    dtx_model_free(taken);
    dtx_trainer_free(t);
    /* a given model is the trainer's, also when init fails; seq past max_seq_len; a bad config */
    dtx_model *init = NULL;
    REQUIRE(dtx_model_init(&init, &c, 3) == DTX_OK);
    o.seq = SEQ + 1;
    CHECK(dtx_trainer_init(&t, &o, ids_path(), NULL, NULL, init, &oc) == DTX_ERR_USAGE && !t &&
          strstr(dtx_last_error(), "longer than the model's max_seq_len"));
    /* a mixture that does not add up, or lacks its files */
    o = public_opts(), o.mix.copy_frac = 0.7, o.mix.icl_frac = 0.5;
    CHECK(dtx_trainer_init(&t, &o, ids_path(), NULL, &c, NULL, &oc) == DTX_ERR_USAGE && !t &&
          strstr(dtx_last_error(), "add up to 1.2"));
    o = public_opts(), o.mix.needle_frac = 0.2;
    CHECK(dtx_trainer_init(&t, &o, ids_path(), NULL, &c, NULL, &oc) == DTX_ERR_USAGE && !t &&
          strstr(dtx_last_error(), "needle_frac needs a tokenizer and a haystack text"));
    o = public_opts(), o.mix.copy_frac = -0.1;
    CHECK(dtx_trainer_init(&t, &o, ids_path(), NULL, &c, NULL, &oc) == DTX_ERR_USAGE && !t &&
          strstr(dtx_last_error(), "copy_frac is -0.1"));
    o = public_opts();
    c.dim = 33;
    CHECK(dtx_trainer_init(&t, &o, ids_path(), NULL, &c, NULL, &oc) == DTX_ERR_CONFIG && !t);
    c = cfg();
    oc.lr = -1;
    CHECK(dtx_trainer_init(&t, &o, ids_path(), NULL, &c, NULL, &oc) != DTX_OK && !t);
    oc = public_optim();
    CHECK(dtx_trainer_init(&t, &o, test_path("trainer_missing.bin"), NULL, &c, NULL, &oc) == DTX_ERR_IO && !t);
    /* a model of its own, started from given weights: the first step equals the fresh run's */
    dtx_trainer *a = NULL, *b = NULL;
    REQUIRE(dtx_model_init(&init, &c, o.seed) == DTX_OK);
    REQUIRE(dtx_trainer_init(&a, &o, ids_path(), NULL, NULL, init, &oc) == DTX_OK && public_steps(a, 2));
    REQUIRE(dtx_trainer_init(&b, &o, ids_path(), NULL, &c, NULL, &oc) == DTX_OK && public_steps(b, 2));
    CHECK(same_params(dtx_trainer_model(a), dtx_trainer_model(b)));
    dtx_trainer_free(a), dtx_trainer_free(b);
    dtx_trainer_free(NULL);
}

/* What difftx train takes from the public trainer beyond the plain loop:
 * the mixture (the internal loop's rows exactly, counted in the info), the
 * precision, and the stop flag (a raised flag: DTX_ERR_STOPPED, nothing
 * changed; lowered: the same steps as a run never stopped). */
TEST(trainer_public_mixture_precision_and_stop) {
    dtx_train_options io = opts();
    io.mix.copy_frac = 0.5, io.mix.needle_max = 6;
    dtx_trainer inner;
    REQUIRE(start(&inner, &io) && run_steps(&inner, 3));
    dtx_train_options o = public_opts();
    o.mix.copy_frac = 0.5;
    dtx_config c = cfg();
    dtx_optim_config oc = public_optim();
    dtx_trainer *t = NULL, *u = NULL;
    REQUIREF(dtx_trainer_init(&t, &o, ids_path(), NULL, &c, NULL, &oc) == DTX_OK, "%s", dtx_last_error());
    volatile sig_atomic_t stop = 0;
    o.stop = &stop;
    REQUIRE(dtx_trainer_init(&u, &o, ids_path(), NULL, &c, NULL, &oc) == DTX_OK);
    REQUIRE(public_steps(t, 3) && public_steps(u, 2));
    CHECK(same_params(inner.model, dtx_trainer_model(t)));
    dtx_train_info info;
    dtx_trainer_info(t, &info);
    CHECK(info.copy_docs == inner.needles.copies && info.copy_docs > 0 && info.needle_docs == 0 &&
          info.last_loss == inner.last_loss);
    stop = 1; /* ACCUM > 1: the step stops after its first micro-batch */
    dtx_train_stats st;
    CHECK(dtx_trainer_should_stop(u) && dtx_trainer_update(u, &st) == DTX_ERR_STOPPED &&
          dtx_trainer_steps_done(u) == 2);
    stop = 0;
    CHECK(!dtx_trainer_should_stop(u) && public_steps(u, 1) && same_params(dtx_trainer_model(t), dtx_trainer_model(u)));
    dtx_trainer_free(u);
    /* bf16: the model's precision and the checkpoint's key */
    o = public_opts(), o.precision = DTX_PREC_BF16;
    REQUIRE(dtx_trainer_init(&u, &o, ids_path(), NULL, &c, NULL, &oc) == DTX_OK);
    CHECK(dtx_model_precision(dtx_trainer_model(u)) == DTX_PREC_BF16 && public_steps(u, 1));
    const char *ck = test_path("trainer_bf16_ck.safetensors");
    REQUIRE(dtx_trainer_save(u, ck) == DTX_OK);
    dtx_trainer_free(u);
    REQUIRE(dtx_trainer_init_checkpoint(&u, &o, ids_path(), NULL, ck, NULL, NULL) == DTX_OK);
    CHECK(dtx_model_precision(dtx_trainer_model(u)) == DTX_PREC_BF16);
    dtx_trainer_free(u);
    dtx_trainer_free(t);
    dtx_trainer_close(&inner);
}

/* The run folder (difftx.h "run folders"): checkpoints named by step and
 * pruned to `keep`, the lock held while open (a second writer refused, a
 * read_only reader not), a folder with checkpoints refused without resume
 * and resumed from its newest with it, a killed write's remains removed, a
 * folder as OUT refused as a usage error, the log's lines. */
TEST(trainer_run_folder) {
    char out[600], dir[700], log[700], stale[800];
    snprintf(out, sizeof out, "%s", test_path("run/model.safetensors"));
    snprintf(dir, sizeof dir, "%s.ckpt", out);
    snprintf(log, sizeof log, "%s.log", out);
    REQUIRE(mkdir(test_path("run"), 0777) == 0);
    dtx_run_options ro = {.out = out, .keep = 2, .log = log};
    dtx_run *r = NULL, *other = NULL;
    REQUIREF(dtx_run_open(&r, &ro) == DTX_OK, "%s", dtx_last_error());
    CHECK(dtx_run_resume_path(r) == NULL && dtx_run_resume_step(r) == -1 && strcmp(dtx_run_ckpt_dir(r), dir) == 0);
    CHECK(dtx_run_open(&other, &ro) == DTX_ERR_IO && !other &&
          strstr(dtx_last_error(), "another difftx train is writing it (") &&
          strstr(dtx_last_error(), ".lock: held by process "));
    dtx_run_options reader = ro;
    reader.read_only = 1;
    CHECK(dtx_run_open(&other, &reader) == DTX_OK);
    dtx_run_close(other);
    dtx_train_options o = public_opts();
    dtx_config c = cfg();
    dtx_optim_config oc = public_optim();
    dtx_trainer *t = NULL;
    REQUIRE(dtx_trainer_init(&t, &o, ids_path(), NULL, &c, NULL, &oc) == DTX_OK);
    REQUIRE(dtx_run_start_log(r, t) == DTX_OK);
    for (int s = 1; s <= 3; s++) {
        REQUIRE(public_steps(t, 1));
        CHECK(dtx_run_log_step(r, t, 100.0, s) == DTX_OK && dtx_run_checkpoint(r, t) == DTX_OK);
    }
    int64_t step = 0;
    const char *last = dtx_run_last_checkpoint(r, &step, NULL);
    CHECK(last && step == 3 && strstr(last, "/ckpt_00000003.safetensors"));
    char p[800];
    snprintf(p, sizeof p, "%s/ckpt_00000001.safetensors", dir);
    CHECK(access(p, F_OK) != 0); /* keep 2 */
    snprintf(p, sizeof p, "%s/ckpt_00000002.safetensors", dir);
    CHECK(access(p, F_OK) == 0);
    CHECK(dtx_run_save_model(r, t, 0) == DTX_OK && access(out, F_OK) == 0);
    dtx_trainer_free(t);
    dtx_run_close(r);
    size_t n = 0;
    char *text = test_slurp(log, &n);
    CHECK(text && strncmp(text, "{\"step\":1,\"loss\":", 17) == 0 && strstr(text, "\"tokens_per_s\":100,\"elapsed_s\":1") &&
          strstr(text, "{\"step\":3,\"checkpoint\":"));
    free(text);
    /* checkpoints there: refused without resume, the newest resumed with it; a dead writer's file removed */
    CHECK(dtx_run_open(&r, &ro) == DTX_ERR_IO && strstr(dtx_last_error(), "already holds checkpoints (the newest of step 3)"));
    snprintf(stale, sizeof stale, "%s/ckpt_00000004.safetensors.tmp.999999999", dir);
    REQUIRE(write_file(stale, "partial", 7) == 0);
    ro.resume = 1;
    REQUIRE(dtx_run_open(&r, &ro) == DTX_OK);
    CHECK(dtx_run_resume_step(r) == 3 && strstr(dtx_run_resume_path(r), "ckpt_00000003") && access(stale, F_OK) != 0);
    dtx_run_close(r);
    dtx_run_options folder = {.out = test_tmpdir()};
    CHECK(dtx_run_open(&r, &folder) == DTX_ERR_USAGE && strstr(dtx_last_error(), "a folder"));
}
