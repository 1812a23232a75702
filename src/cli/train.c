/* difftx train: AdamW training of a new model (config flags) or of an
 * existing one (--init) on a token file, saved as safetensors at the end. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/batch.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "difftx.h"

static const char *CMD = "train";

/* The usage text shows the library's defaults, so it is built at run time. */
static const char *usage_text(char *buf, size_t cap) {
    dtx_config c = dtx_config_default();
    dtx_optim_config o = dtx_optim_default();
    static const char *const sched[] = {"cosine", "linear", "constant"};
    snprintf(buf, cap,
             "usage: difftx train --tokens FILE --out MODEL.safetensors [flags]\n"
             "\n"
             "Trains a model with AdamW on random windows of a token stream and saves it.\n"
             "\n"
             "data and output:\n"
             "  --tokens FILE        token ids (whitespace-separated text, or a token shard)  [required]\n"
             "  --out PATH           where to save the model (safetensors)                    [required]\n"
             "  --bf16               save BF16 tensors (default F32)\n"
             "  --init MODEL         continue from the weights of MODEL (fresh optimizer state);\n"
             "                       the model flags below are then refused\n"
             "\n"
             "model (new models only; defaults in parentheses):\n"
             "  --arch diff|transformer (%s)\n"
             "  --dim N (%lld)  --layers N (%lld)  --heads N (%lld)  --kv-heads N (= --heads)\n"
             "  --vocab N (%lld)  --ffn N (%lld)  --max-seq N (= --seq, else %lld)\n"
             "  --rope-theta X (%g)  --norm-eps X (%g)\n"
             "  --tie | --no-tie     share the output projection with the token embedding (%s)\n"
             "\n"
             "batches:\n"
             "  --steps N            optimizer steps (1000); also the schedule length\n"
             "  --batch N            windows per micro-batch (8)\n"
             "  --seq N              tokens per window (the model's max_seq_len)\n"
             "  --accum N            micro-batches accumulated per step (1)\n"
             "  --seed N             seeds the initial weights and the batch sampler (1)\n"
             "\n"
             "optimizer:\n"
             "  --lr X (%g)  --min-lr X (%g x lr)  --warmup N (%lld)\n"
             "  --schedule cosine|linear|constant (%s)\n"
             "  --wd X (%g)  --decay-embeddings (%s)  --beta1 X (%g)  --beta2 X (%g)  --adam-eps X (%g)\n"
             "  --clip X (%g)         global gradient-norm clip; 0 disables\n"
             "\n"
             "  --precision fp32|bf16 matrix products in fp32 (default), or with bf16 operands and\n"
             "                       fp32 accumulation; weights, gradients and AdamW state stay fp32\n"
             "  --log-every N        print a progress line every N steps (10)\n",
             dtx_arch_name(c.arch), (long long)c.dim, (long long)c.n_layers, (long long)c.n_heads,
             (long long)c.vocab_size, (long long)c.ffn_dim, (long long)c.max_seq_len, c.rope_theta, c.norm_eps,
             c.tie_embeddings ? "tied" : "untied", o.lr, o.min_lr / o.lr, (long long)o.warmup_steps,
             (unsigned)o.schedule < 3 ? sched[o.schedule] : "?", o.weight_decay, o.decay_embeddings ? "on" : "off",
             o.beta1, o.beta2, o.eps, o.clip_norm);
    return buf;
}

typedef struct {
    dtx_config cfg;
    dtx_optim_config opt;
    int arch, schedule, precision;
    const char *init, *tokens, *out;
    int64_t steps, batch, seq, accum, log_every;
    uint64_t seed;
    int bf16;
} train_args;

/* The flags that describe a new model's shape: refused with --init. */
static const char *const CONFIG_FLAGS[] = {"--arch", "--vocab", "--dim", "--layers", "--heads", "--kv-heads",
                                           "--ffn", "--max-seq", "--rope-theta", "--norm-eps", "--tie", "--no-tie"};
enum { N_CONFIG_FLAGS = sizeof CONFIG_FLAGS / sizeof CONFIG_FLAGS[0] };

static void set_defaults(train_args *a) {
    memset(a, 0, sizeof *a);
    a->cfg = dtx_config_default();
    a->opt = dtx_optim_default();
    a->arch = (int)a->cfg.arch;
    a->schedule = (int)a->opt.schedule;
    a->steps = 1000;
    a->batch = 8;
    a->accum = 1;
    a->log_every = 10;
    a->seed = 1;
}

/* --seq against the model (known only after --init is read). */
static int check_seq(train_args *a, flag *fl, int n_fl, const dtx_config *c) {
    if (!flags_get(fl, n_fl, "--seq")->seen) a->seq = c->max_seq_len;
    if (a->seq > c->max_seq_len)
        return usage_error(CMD, "--seq: %lld is longer than the model's max_seq_len %lld", (long long)a->seq,
                           (long long)c->max_seq_len);
    return EXIT_OK;
}

/* Everything that needs the flags alone. Returns EXIT_OK or an exit code. */
static int check_flags(train_args *a, flag *fl, int n_fl) {
    if (!a->tokens) return usage_error(CMD, "--tokens is required (a token file to train on)");
    if (!a->out) return usage_error(CMD, "--out is required (where to save the model)");
    a->opt.schedule = (dtx_schedule)a->schedule;
    a->opt.total_steps = a->steps;
    if (flags_get(fl, n_fl, "--lr")->seen && !flags_get(fl, n_fl, "--min-lr")->seen) {
        /* Keep the default floor's ratio to the peak, so that a small --lr
         * alone does not fall below the default --min-lr. */
        dtx_optim_config d = dtx_optim_default();
        a->opt.min_lr = a->opt.lr * (d.min_lr / d.lr);
    }
    if (dtx_optim_validate(&a->opt) != DTX_OK) return usage_error(CMD, "%s", dtx_last_error());
    if (a->init) {
        for (int i = 0; i < N_CONFIG_FLAGS; i++)
            if (flags_get(fl, n_fl, CONFIG_FLAGS[i])->seen)
                return usage_error(CMD, "%s: cannot be combined with --init (the model file fixes the config)",
                                   CONFIG_FLAGS[i]);
        return EXIT_OK;
    }
    a->cfg.arch = (dtx_arch)a->arch;
    if (!flags_get(fl, n_fl, "--kv-heads")->seen) a->cfg.n_kv_heads = a->cfg.n_heads;
    if (!flags_get(fl, n_fl, "--max-seq")->seen && flags_get(fl, n_fl, "--seq")->seen) a->cfg.max_seq_len = a->seq;
    if (dtx_config_validate(&a->cfg) != DTX_OK) return usage_error(CMD, "%s", dtx_last_error());
    return check_seq(a, fl, n_fl, &a->cfg);
}

/* Fail before training rather than after: the output's folder must be writable. */
static int check_out_dir(const char *out) {
    char dir[4096];
    const char *slash = strrchr(out, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == out) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - out), out);
    if (access(dir, W_OK) != 0)
        return runtime_error(CMD, "--out %s: cannot write to folder '%s': %s", out, dir, strerror(errno));
    return EXIT_OK;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    dtx_model *model;
    dtx_optimizer *opt;
    int32_t *tokens;
    int64_t n_tokens;
    batcher batches;
} train_state;

static void state_free(train_state *s) {
    batcher_free(&s->batches);
    dtx_optimizer_free(s->opt);
    dtx_model_free(s->model);
    free(s->tokens);
}

/* One optimizer step over accum micro-batches; *loss is their mean. */
static int train_step(train_state *s, const train_args *a, double *loss, double *gnorm, double *lr) {
    dtx_model_zero_grad(s->model);
    double sum = 0;
    for (int64_t k = 0; k < a->accum; k++) {
        batcher_next(&s->batches);
        double l;
        if (dtx_model_forward(s->model, s->batches.inputs, s->batches.targets, a->batch, a->seq, NULL, &l) != DTX_OK ||
            dtx_model_backward(s->model, 1.0 / (double)a->accum) != DTX_OK)
            return lib_error(CMD);
        sum += l;
    }
    *loss = sum / (double)a->accum;
    if (!isfinite(*loss))
        return runtime_error(CMD, "loss became %g at step %lld; try a lower --lr or a --clip", *loss,
                             (long long)dtx_optimizer_steps_done(s->opt) + 1);
    if (dtx_optimizer_step(s->opt, gnorm, lr) != DTX_OK) return lib_error(CMD);
    return EXIT_OK;
}

static int train_loop(train_state *s, const train_args *a, double *final_loss) {
    double t_last = now_s();
    int64_t last_logged = 0;
    for (int64_t step = 1; step <= a->steps; step++) {
        double loss = NAN, gnorm = NAN, lr = NAN;
        int rc = train_step(s, a, &loss, &gnorm, &lr);
        if (rc != EXIT_OK) return rc;
        *final_loss = loss;
        if (step % a->log_every == 0 || step == a->steps) {
            double t = now_s();
            double toks = (double)(step - last_logged) * (double)(a->batch * a->seq * a->accum);
            printf("step %lld/%lld  loss %.4f  lr %.2e  gnorm %.3f  %.0f tok/s\n", (long long)step,
                   (long long)a->steps, loss, lr, gnorm, toks / (t - t_last > 1e-9 ? t - t_last : 1e-9));
            fflush(stdout);
            t_last = t;
            last_logged = step;
        }
    }
    return EXIT_OK;
}

static int load_data(train_state *s, const train_args *a, const dtx_config *c) {
    if (dtx_tokens_read(a->tokens, c->vocab_size, &s->tokens, &s->n_tokens) != DTX_OK) return lib_error(CMD);
    if (s->n_tokens < a->seq + 1)
        return runtime_error(CMD, "%s holds %lld tokens; --seq %lld needs at least %lld", a->tokens,
                             (long long)s->n_tokens, (long long)a->seq, (long long)a->seq + 1);
    /* A different stream than the weight init, same seed. */
    if (batcher_init(&s->batches, s->tokens, s->n_tokens, a->batch, a->seq, a->seed ^ 0x5eedba7c4e5ULL) != DTX_OK)
        return lib_error(CMD);
    return EXIT_OK;
}

static void print_header(const train_state *s, const train_args *a) {
    const dtx_config *c = dtx_model_config(s->model);
    printf("model %s  dim %lld  layers %lld  heads %lld  kv_heads %lld  vocab %lld  ffn %lld  max_seq %lld  %s  "
           "%zu params%s%s\n",
           dtx_arch_name(c->arch), (long long)c->dim, (long long)c->n_layers, (long long)c->n_heads,
           (long long)c->n_kv_heads, (long long)c->vocab_size, (long long)c->ffn_dim, (long long)c->max_seq_len,
           c->tie_embeddings ? "tied" : "untied", dtx_model_num_params(s->model), a->init ? "  from " : "",
           a->init ? a->init : "");
    printf("data %s: %lld tokens  batch %lld x seq %lld x accum %lld = %lld tokens/step  %lld steps\n", a->tokens,
           (long long)s->n_tokens, (long long)a->batch, (long long)a->seq, (long long)a->accum,
           (long long)(a->batch * a->seq * a->accum), (long long)a->steps);
    fflush(stdout);
}

static int run(train_args *a, flag *fl, int n_fl) {
    train_state s = {0};
    int rc = check_out_dir(a->out);
    if (rc == EXIT_OK) {
        dtx_status st = a->init ? dtx_model_load(&s.model, a->init) : dtx_model_init(&s.model, &a->cfg, a->seed);
        rc = st == DTX_OK ? EXIT_OK : lib_error(CMD);
    }
    if (rc == EXIT_OK && dtx_model_set_precision(s.model, (dtx_precision)a->precision) != DTX_OK) rc = lib_error(CMD);
    if (rc == EXIT_OK && a->init) rc = check_seq(a, fl, n_fl, dtx_model_config(s.model));
    if (rc == EXIT_OK) rc = load_data(&s, a, dtx_model_config(s.model));
    if (rc == EXIT_OK && dtx_optimizer_init(&s.opt, s.model, &a->opt) != DTX_OK) rc = lib_error(CMD);
    double final_loss = NAN;
    if (rc == EXIT_OK) {
        print_header(&s, a);
        rc = train_loop(&s, a, &final_loss);
    }
    if (rc == EXIT_OK && dtx_model_save(s.model, a->out, a->bf16) != DTX_OK) rc = lib_error(CMD);
    if (rc == EXIT_OK) {
        printf("final loss %.4f\nsaved %s\n", final_loss, a->out);
        rc = finish_stdout(CMD);
    }
    state_free(&s);
    return rc;
}

int cmd_train(int argc, char **argv) {
    train_args a;
    set_defaults(&a);
    const int64_t BIG = INT64_MAX, SIZE = 1 << 20, BATCH = 1 << 16;
    flag fl[] = {
        FLAG_STR("--tokens", &a.tokens),
        FLAG_STR("--out", &a.out),
        FLAG_BOOL("--bf16", &a.bf16, 1),
        FLAG_STR("--init", &a.init),
        FLAG_CHOICE("--arch", &a.arch, "diff|transformer"),
        FLAG_INT("--vocab", &a.cfg.vocab_size, 1, INT32_MAX),
        FLAG_INT("--dim", &a.cfg.dim, 1, SIZE),
        FLAG_INT("--layers", &a.cfg.n_layers, 1, SIZE),
        FLAG_INT("--heads", &a.cfg.n_heads, 1, SIZE),
        FLAG_INT("--kv-heads", &a.cfg.n_kv_heads, 1, SIZE),
        FLAG_INT("--ffn", &a.cfg.ffn_dim, 1, SIZE),
        FLAG_INT("--max-seq", &a.cfg.max_seq_len, 1, SIZE),
        FLAG_REAL("--rope-theta", &a.cfg.rope_theta, 0, 1, INFINITY, 0),
        FLAG_REAL("--norm-eps", &a.cfg.norm_eps, 0, 1, 1, 1),
        FLAG_BOOL("--tie", &a.cfg.tie_embeddings, 1),
        FLAG_BOOL("--no-tie", &a.cfg.tie_embeddings, 0),
        FLAG_INT("--steps", &a.steps, 1, BIG),
        FLAG_INT("--batch", &a.batch, 1, BATCH),
        FLAG_INT("--seq", &a.seq, 1, SIZE),
        FLAG_INT("--accum", &a.accum, 1, BATCH),
        FLAG_SEED("--seed", &a.seed),
        FLAG_REAL("--lr", &a.opt.lr, 0, 1, INFINITY, 0),
        FLAG_REAL("--min-lr", &a.opt.min_lr, 0, 0, INFINITY, 0),
        FLAG_INT("--warmup", &a.opt.warmup_steps, 0, BIG),
        FLAG_CHOICE("--schedule", &a.schedule, "cosine|linear|constant"),
        FLAG_REAL("--wd", &a.opt.weight_decay, 0, 0, INFINITY, 0),
        FLAG_BOOL("--decay-embeddings", &a.opt.decay_embeddings, 1),
        FLAG_REAL("--beta1", &a.opt.beta1, 0, 0, 1, 1),
        FLAG_REAL("--beta2", &a.opt.beta2, 0, 0, 1, 1),
        FLAG_REAL("--adam-eps", &a.opt.eps, 0, 1, INFINITY, 0),
        FLAG_REAL("--clip", &a.opt.clip_norm, 0, 0, INFINITY, 0),
        FLAG_INT("--log-every", &a.log_every, 1, BIG),
        FLAG_CHOICE("--precision", &a.precision, "fp32|bf16"),
    };
    int n_fl = (int)(sizeof fl / sizeof fl[0]);
    char usage[4096];
    switch (flags_parse(CMD, usage_text(usage, sizeof usage), fl, n_fl, argc, argv, NULL, 0, NULL)) {
    case FLAGS_HELP: return finish_stdout(CMD);
    case FLAGS_ERROR: return EXIT_USAGE;
    }
    int rc = check_flags(&a, fl, n_fl);
    return rc != EXIT_OK ? rc : run(&a, fl, n_fl);
}
