/* difftx train: AdamW training of a new model (config flags) or of an
 * existing one (--init) on a token shard or a text file of ids, with a
 * progress display, validation, a JSONL log, and checkpoints that resume
 * bit-identically (docs/training.md). The final model is saved at the end.
 * A client of the public trainer (difftx.h "training": the state, the step,
 * the mixture, the ranks' sums, the resume check) and run folder (the lock,
 * the checkpoint files, the JSONL log), as Python's train() is; this file
 * keeps the flags, the progress display, the signals, the MPI launch and the
 * loop's cadence. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "difftx.h"
#include "cli/cli.h"
#include "cli/flags.h"

static const char *CMD = "train";

/* The usage text shows the library's defaults, so it is built at run time. */
static const char USAGE[] =
    "usage: difftx train --tokens FILE --out MODEL.safetensors [flags]\n"
    "\n"
    "Trains a model with AdamW on random windows of a token stream and saves it.\n"
    "See docs/training.md for checkpoints, resuming and the log format.\n"
    "\n";

typedef struct {
    dtx_config cfg;
    dtx_optim_config opt;
    dtx_train_options to; /* batches, seed, mixture, ranks, test hooks (precision and scheme: check_flags) */
    int arch, schedule, precision, subln, init_scheme, v2_lambda, recall_loss;
    const char *lambda_init;
    const char *init, *tokens, *out, *val_tokens, *log_path, *ckpt_dir_flag;
    int64_t steps, log_every, log_steps;
    int64_t eval_every, ckpt_every, keep, stop_after;
    int bf16, resume;
    char ckpt_dir[4096];
} train_args;

/* The flags that describe a new model's shape: refused with --init, but for
 * --max-seq and --rope-theta, which no weight depends on (a longer context,
 * with RoPE's base raised or not, is how a model is extended). */
static const char *const CONFIG_FLAGS[] = {"--arch",       "--vocab",    "--dim",   "--layers", "--heads",
                                           "--kv-heads",   "--ffn",      "--max-seq", "--rope-theta",
                                           "--norm-eps",   "--tie",      "--no-tie", "--subln", "--lambda-init",
                                           "--v2-lambda",  "--init-scheme"};
enum { N_CONFIG_FLAGS = sizeof CONFIG_FLAGS / sizeof CONFIG_FLAGS[0] };

static void set_defaults(train_args *a) {
    memset(a, 0, sizeof *a);
    a->cfg = dtx_config_default();
    a->opt = dtx_optim_default();
    a->to = dtx_train_options_default();
    a->arch = (int)a->cfg.arch;
    a->schedule = (int)a->opt.schedule;
    a->init_scheme = (int)a->to.init_scheme;
    a->steps = 1000;
    a->log_every = 10;
    a->log_steps = 1;
    a->eval_every = 100;
    a->keep = 3;
}

/* --max-seq / --rope-theta with --init: the same weights in a model of the
 * new context length or RoPE base (the parameter layout does not depend on
 * either). */
static int extend_context(const train_args *a, flag *fl, int n_fl, dtx_model **m, dtx_config *cfg) {
    int len = flags_get(fl, n_fl, "--max-seq")->seen, theta = flags_get(fl, n_fl, "--rope-theta")->seen;
    if (!len && !theta) return EXIT_OK;
    dtx_config c = *cfg;
    if (len) c.max_seq_len = a->cfg.max_seq_len;
    if (theta) c.rope_theta = a->cfg.rope_theta;
    if (dtx_config_validate(&c) != DTX_OK) return usage_error(CMD, "%s", dtx_last_error());
    dtx_model *wide = NULL;
    if (dtx_model_init(&wide, &c, 0) != DTX_OK) return lib_error(CMD);
    if (dtx_model_num_params(wide) != dtx_model_num_params(*m)) {
        dtx_model_free(wide);
        return runtime_error(CMD, "--init %s: a model of max_seq_len %lld has another parameter count", a->init,
                             (long long)c.max_seq_len);
    }
    memcpy(dtx_model_params(wide), dtx_model_params(*m), dtx_model_num_params(*m) * sizeof(dtx_real));
    dtx_model_free(*m);
    *m = wide;
    *cfg = c;
    return EXIT_OK;
}

/* --seq against the model (known only after --init is read). */
static int check_seq(train_args *a, flag *fl, int n_fl, const dtx_config *c) {
    if (!flags_get(fl, n_fl, "--seq")->seen) a->to.seq = c->max_seq_len;
    if (a->to.seq > c->max_seq_len)
        return usage_error(CMD, "--seq: %lld is longer than the model's max_seq_len %lld", (long long)a->to.seq,
                           (long long)c->max_seq_len);
    return EXIT_OK;
}

/* Everything that needs the flags alone. Returns EXIT_OK or an exit code. */
static int check_flags(train_args *a, flag *fl, int n_fl) {
    if (!a->tokens) return usage_error(CMD, "--tokens is required (a token file to train on)");
    if (!a->out) return usage_error(CMD, "--out is required (where to save the model)");
    if (!a->val_tokens) {
        if (flags_get(fl, n_fl, "--eval-every")->seen) return usage_error(CMD, "--eval-every needs --val-tokens");
        if (flags_get(fl, n_fl, "--eval-batches")->seen) return usage_error(CMD, "--eval-batches needs --val-tokens");
    }
    /* the mixture's shares and files: checked by the trainer, before any step */
    a->to.precision = (dtx_precision)a->precision;
    a->to.init_scheme = (dtx_init_scheme)a->init_scheme;
    if (a->ckpt_dir_flag) snprintf(a->ckpt_dir, sizeof a->ckpt_dir, "%s", a->ckpt_dir_flag);
    else snprintf(a->ckpt_dir, sizeof a->ckpt_dir, "%s.ckpt", a->out);
    a->opt.schedule = (dtx_schedule)a->schedule;
    a->opt.total_steps = a->steps;
    if (flags_get(fl, n_fl, "--lr")->seen && !flags_get(fl, n_fl, "--min-lr")->seen) {
        /* Keep the default floor's ratio to the peak, so that a small --lr
         * alone does not fall below the default --min-lr. */
        dtx_optim_config d = dtx_optim_default();
        a->opt.min_lr = a->opt.lr * (d.min_lr / d.lr);
    }
    if (dtx_optim_validate(&a->opt) != DTX_OK) return usage_error(CMD, "%s", dtx_last_error());
    a->to.mix.recall_all_targets = a->recall_loss == 1;
    if (a->init) {
        for (int i = 0; i < N_CONFIG_FLAGS; i++)
            if (flags_get(fl, n_fl, CONFIG_FLAGS[i])->seen && strcmp(CONFIG_FLAGS[i], "--max-seq") != 0 &&
                strcmp(CONFIG_FLAGS[i], "--rope-theta") != 0)
                return usage_error(CMD, "%s: cannot be combined with --init (the model file fixes the config)",
                                   CONFIG_FLAGS[i]);
        return EXIT_OK;
    }
    a->cfg.arch = (dtx_arch)a->arch;
    if (flags_get(fl, n_fl, "--subln")->seen) a->cfg.subln = a->subln == 0 ? DTX_SUBLN_RMS : DTX_SUBLN_NONE;
    if (a->lambda_init && dtx_config_set_lambda_init(&a->cfg, a->lambda_init) != DTX_OK)
        return usage_error(CMD, "--lambda-init: expected 'schedule' or a number in [0, 1), got '%s'", a->lambda_init);
    a->cfg.v2_lambda = (dtx_v2_lambda)a->v2_lambda;
    if (!flags_get(fl, n_fl, "--kv-heads")->seen) a->cfg.n_kv_heads = a->cfg.n_heads;
    if (!flags_get(fl, n_fl, "--max-seq")->seen && flags_get(fl, n_fl, "--seq")->seen) a->cfg.max_seq_len = a->to.seq;
    if (dtx_config_validate(&a->cfg) != DTX_OK) return usage_error(CMD, "%s", dtx_last_error());
    return check_seq(a, fl, n_fl, &a->cfg);
}


/* ---------------------------------------------------------------- signals */

static volatile sig_atomic_t g_signal;  /* the first SIGINT/SIGTERM: stop after this step */
static volatile sig_atomic_t g_writing; /* a checkpoint or the model is being written     */
static volatile sig_atomic_t g_force;   /* a second signal arrived during that write      */

static void on_signal(int sig) {
    if (!g_signal) {
        g_signal = sig;
        return;
    }
    if (g_writing) {
        g_force = sig;
        return;
    }
    static const char msg[] = "\ndifftx train: interrupted again: quitting without a checkpoint\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(128 + sig);
}

static void install_signals(struct sigaction *old_int, struct sigaction *old_term) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, old_int);
    sigaction(SIGTERM, &sa, old_term);
}

/* ---------------------------------------------------------------- state */

typedef struct {
    dtx_trainer *tr;              /* the model, optimizer, data, sampler and step (difftx.h "training") */
    dtx_train_info info;          /* how it began: the streams, the step resumed from, the ranks */
    dtx_run *run;                 /* the run folder: lock, checkpoints, log (difftx.h "run folders") */
    int64_t start_step;           /* steps done when this process began training */
    double last_lr;               /* the last step's rate (the final progress bar) */
    int quiet;                    /* a rank other than 0: no output, log, checkpoint or model */
    /* progress display */
    int bar, lines, bar_shown;
    double t0, t_line, t_bar;
    int64_t line_step;
} train_state;

static void state_free(train_state *s) {
    dtx_trainer_free(s->tr);
    s->tr = NULL;
    dtx_run_close(s->run);
    s->run = NULL;
}

/* The newest checkpoint written or resumed from (NULL: none) and its step. */
static const char *last_ckpt(const train_state *s, int64_t *step) {
    return dtx_run_last_checkpoint(s->run, step, NULL);
}

static const struct {
    const char *key, *flag;
} KEY_FLAGS[] = {
    {"arch", "--arch"},         {"dim", "--dim"},
    {"n_layers", "--layers"},   {"n_heads", "--heads"},
    {"n_kv_heads", "--kv-heads"}, {"vocab_size", "--vocab"},
    {"ffn_dim", "--ffn"},       {"max_seq_len", "--max-seq"},
    {"rope_theta", "--rope-theta"}, {"norm_eps", "--norm-eps"},
    {"tie_embeddings", "--tie/--no-tie"}, {"subln", "--subln"},
    {"lambda_init", "--lambda-init"}, {"v2_lambda", "--v2-lambda"}, {"lr", "--lr"},
    {"min_lr", "--min-lr"},     {"warmup_steps", "--warmup"},
    {"total_steps", "--steps"}, {"schedule", "--schedule"},
    {"beta1", "--beta1"},       {"beta2", "--beta2"},
    {"eps", "--adam-eps"},      {"weight_decay", "--wd"},
    {"decay_embeddings", "--decay-embeddings"}, {"clip_norm", "--clip"},
    {"batch", "--batch"},       {"seq", "--seq"},
    {"accum", "--accum"},       {"seed", "--seed"},
    {"precision", "--precision"}, {"data_tokens", "--tokens"},
    {"data_hash", "--tokens"},  {"needles", "--needle-frac/--copy-frac/--needle-max/--icl-frac/--halluc-frac/--fact-frac"},
    {"init_scheme", "--init-scheme"}, {"diff_warmup", "--diff-warmup"},
};

static const char *flag_of(const char *key, const train_args *a) {
    static const char *const model_keys[] = {"arch",        "dim",        "n_layers", "n_heads",
                                             "n_kv_heads",  "vocab_size", "ffn_dim",  "max_seq_len",
                                             "rope_theta",  "norm_eps",   "tie_embeddings", "subln",
                                             "lambda_init", "v2_lambda"};
    if (a->init) {
        /* the two a run may change with --init (extending the context) */
        if (strcmp(key, "max_seq_len") == 0) return "--init/--max-seq";
        if (strcmp(key, "rope_theta") == 0) return "--init/--rope-theta";
        for (size_t i = 0; i < sizeof model_keys / sizeof *model_keys; i++)
            if (strcmp(key, model_keys[i]) == 0) return "--init";
    }
    for (size_t i = 0; i < sizeof KEY_FLAGS / sizeof *KEY_FLAGS; i++)
        if (strcmp(key, KEY_FLAGS[i].key) == 0) return KEY_FLAGS[i].flag;
    return key;
}

/* A value for a message: real numbers (written with %.17g) shortened with
 * %g when that still tells the two apart. */
static void show_value(char *buf, size_t cap, const char *key, const char *v, const char *other) {
    static const char *const reals[] = {"rope_theta", "norm_eps", "lr",           "min_lr",   "beta1",
                                        "beta2",      "eps",      "weight_decay", "clip_norm"};
    int is_real = 0;
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++) is_real |= strcmp(key, reals[i]) == 0;
    char *e1, *e2;
    double x = strtod(v, &e1), y = strtod(other, &e2);
    if (is_real && *v && *other && *e1 == '\0' && *e2 == '\0') {
        char sx[64], sy[64];
        snprintf(sx, sizeof sx, "%g", x);
        snprintf(sy, sizeof sy, "%g", y);
        if (strcmp(sx, sy) != 0) {
            snprintf(buf, cap, "%s", sx);
            return;
        }
    }
    snprintf(buf, cap, "%s", v);
}

/* The library's refusal of a checkpoint made with other settings than this
 * run's (the result would not be the one an uninterrupted run gives), in
 * the command's words: the flag that decides the setting. */
static int resume_refused(const char *path, const train_args *a) {
    const char *key, *here_v, *there_v;
    dtx_trainer_mismatch(&key, &here_v, &there_v);
    if (!key) return usage_error(CMD, "--resume: %s", dtx_last_error());
    char here[80], there[80];
    show_value(here, sizeof here, key, here_v, there_v);
    show_value(there, sizeof there, key, there_v, here_v);
    return usage_error(CMD,
                       "--resume: %s differs from the checkpoint %s (%s = %s in this run, %s in the checkpoint); "
                       "a resumed run must use the same settings",
                       flag_of(key, a), path, key, here, there);
}

/* ---------------------------------------------------------------- output */

/* A stdout line; a progress bar on stderr is cleared first. */
__attribute__((format(printf, 2, 3))) static void say(train_state *s, const char *fmt, ...) {
    if (s->quiet) return;
    if (s->bar_shown) {
        fputs("\r\033[K", stderr);
        s->bar_shown = 0;
    }
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

/* Ends the progress bar's line (keeping it), so that a message that follows
 * starts on a line of its own. */
static void bar_break(train_state *s) {
    if (!s->bar_shown) return;
    fputc('\n', stderr);
    fflush(stderr);
    s->bar_shown = 0;
}

/* A library call's failure as the command's exit code (the bar's line kept). */
static int lib_fail(train_state *s, dtx_status st) {
    if (st == DTX_OK) return EXIT_OK;
    bar_break(s);
    return st == DTX_ERR_USAGE ? usage_error(CMD, "%s", dtx_last_error()) : lib_error(CMD);
}

static void fmt_eta(char *buf, size_t cap, double sec) {
    if (!isfinite(sec) || sec < 0) snprintf(buf, cap, "?");
    else if (sec < 60) snprintf(buf, cap, "%.0fs", sec);
    else if (sec < 3600) snprintf(buf, cap, "%dm%02ds", (int)(sec / 60), (int)fmod(sec, 60));
    else if (sec < 100 * 3600.0) snprintf(buf, cap, "%dh%02dm", (int)(sec / 3600), (int)fmod(sec / 60, 60));
    else snprintf(buf, cap, "%.0fh", sec / 3600);
}

static void fmt_rate(char *buf, size_t cap, double r) {
    if (r >= 1e6) snprintf(buf, cap, "%.2fM", r / 1e6);
    else if (r >= 1e4) snprintf(buf, cap, "%.1fk", r / 1e3);
    else snprintf(buf, cap, "%.0f", r);
}

static int term_width(void) {
    struct winsize w;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col >= 20) return w.ws_col;
    return 80;
}

static void draw_bar(train_state *s, const train_args *a, int64_t step, double loss, double lr, double now) {
    double el = now - s->t0, done = (double)(step - s->start_step);
    double per_step = done > 0 ? el / done : NAN;
    double rate = el > 0 ? done * (double)(a->to.batch * a->to.seq * a->to.accum) / el : 0;
    char eta[32], r[32], head[64], tail[256], bar[64] = "", line[512];
    fmt_eta(eta, sizeof eta, per_step * (double)(a->steps - step));
    fmt_rate(r, sizeof r, rate);
    snprintf(head, sizeof head, "step %lld/%lld", (long long)step, (long long)a->steps);
    int nt = snprintf(tail, sizeof tail, " %3.0f%%  loss %.4f  lr %.2e  %s tok/s  eta %s",
                      floor(100.0 * (double)step / (double)a->steps), loss, lr, r, eta);
    /* never wrap: \r returns to the start of this line only. The bar takes
     * what the terminal leaves, up to 30 cells; the text is cut last. */
    int cols = term_width() - 1, width = cols - (int)strlen(head) - nt - 3;
    if (width > 30) width = 30;
    if (width >= 5) {
        int filled = (int)((double)width * (double)step / (double)a->steps);
        bar[0] = ' ';
        bar[1] = '[';
        for (int i = 0; i < width; i++) bar[2 + i] = i < filled ? '#' : '.';
        bar[2 + width] = ']';
        bar[3 + width] = '\0';
    }
    int n = snprintf(line, sizeof line, "%s%s%s", head, bar, tail);
    if (n > cols) line[cols] = '\0';
    fprintf(stderr, "\r%s\033[K", line);
    fflush(stderr);
    s->bar_shown = 1;
    s->t_bar = now;
}

static void report(train_state *s, const train_args *a, int64_t step, double loss, double lr, double gnorm,
                   double now) {
    if (s->bar && (step == s->start_step + 1 || step == a->steps || now - s->t_bar >= 0.1))
        draw_bar(s, a, step, loss, lr, now);
    if (s->lines && (step % a->log_every == 0 || step == a->steps)) {
        double dt = now - s->t_line, el = now - s->t0;
        double toks = (double)(step - s->line_step) * (double)(a->to.batch * a->to.seq * a->to.accum);
        char eta[32];
        fmt_eta(eta, sizeof eta, el / (double)(step - s->start_step) * (double)(a->steps - step));
        say(s, "step %lld/%lld  loss %.4f  lr %.2e  gnorm %.3f  %.0f tok/s  eta %s\n", (long long)step,
            (long long)a->steps, loss, lr, gnorm, toks / (dt > 1e-9 ? dt : 1e-9), eta);
        s->t_line = now;
        s->line_step = step;
    }
}

/* ---------------------------------------------------------------- steps */

/* Writes the checkpoint of the state (unless that one is already on disk).
 * A second Ctrl-C during the write lets it finish, then quits. Returns
 * EXIT_OK or an exit code. */
static int write_ckpt(train_state *s) {
    g_writing = 1;
    dtx_status st = dtx_run_checkpoint(s->run, s->tr);
    g_writing = 0;
    int rc = lib_fail(s, st);
    if (g_force) {
        bar_break(s);
        if (rc == EXIT_OK)
            fprintf(stderr, "difftx train: interrupted again; checkpoint written to %s\n", last_ckpt(s, NULL));
        exit(128 + g_force);
    }
    return rc;
}

/* Stops the run at a non-finite loss or gradient norm (v says which value). */
static int stop_nonfinite(train_state *s, int64_t step, const char *what, const char *v, double x) {
    char err[64];
    snprintf(err, sizeof err, "%s is not finite", what);
    /* the run stops either way; a log that cannot be written is reported there */
    if (dtx_run_log_error(s->run, step, x, err) != DTX_OK) lib_fail(s, DTX_ERR_IO);
    bar_break(s);
    int64_t at;
    const char *ck = last_ckpt(s, &at);
    if (ck)
        return runtime_error(CMD, "%s is %s at step %lld: stopped without updating the weights; the last good "
                                  "checkpoint is %s (step %lld)",
                             what, v, (long long)step, ck, (long long)at);
    return runtime_error(CMD, "%s is %s at step %lld: stopped without updating the weights; no checkpoint was "
                              "written (see --ckpt-every)",
                         what, v, (long long)step);
}

enum { LOOP_DONE = 0, LOOP_STOPPED = -2 };

/* Runs steps start_step+1 .. steps. Returns LOOP_DONE, LOOP_STOPPED
 * (--stop-after: checkpoint written), or an exit code (130/143 for a signal,
 * checkpoint written). */
static int train_loop(train_state *s, const train_args *a) {
    const double tokens_per_step = (double)(a->to.batch * a->to.seq * a->to.accum);
    s->t0 = s->t_line = dtx_now_s();
    s->line_step = s->start_step;
    if (a->stop_after > 0 && a->stop_after <= s->start_step) {
        say(s, "already at step %lld, not before --stop-after %lld: nothing to do\n", (long long)s->start_step,
            (long long)a->stop_after);
        return LOOP_STOPPED;
    }
    for (int64_t step = s->start_step + 1; step <= a->steps; step++) {
        if (dtx_trainer_should_stop(s->tr)) { /* every rank at once */
            int rc = write_ckpt(s);
            bar_break(s);
            if (rc != EXIT_OK) return rc;
            if (!s->quiet)
                fprintf(stderr, "difftx train: interrupted at step %lld; checkpoint written to %s; resume with --resume\n",
                        (long long)(step - 1), last_ckpt(s, NULL));
            return 128 + (g_signal ? g_signal : SIGINT);
        }
        double t_step = dtx_now_s();
        dtx_train_stats st;
        dtx_status sr = dtx_trainer_update(s->tr, &st);
        if (sr == DTX_ERR_STOPPED) {
            step--; /* the step did not happen: the top of the loop writes the checkpoint */
            continue;
        }
        double loss = st.loss, gnorm = st.grad_norm, lr = st.lr;
        if (sr == DTX_ERR_NUMERIC && !isfinite(loss))
            return stop_nonfinite(s, step, "the loss", isnan(loss) ? "NaN" : loss > 0 ? "inf" : "-inf", loss);
        if (sr == DTX_ERR_NUMERIC) return stop_nonfinite(s, step, "the gradient norm", "not finite", loss);
        if (sr != DTX_OK) {
            bar_break(s);
            return lib_error(CMD);
        }
        s->last_lr = lr;
        double now = dtx_now_s();
        double rate = tokens_per_step / (now - t_step > 1e-9 ? now - t_step : 1e-9);
        int rc = EXIT_OK;
        if (step % a->log_steps == 0 || step == a->steps) {
            rc = lib_fail(s, dtx_run_log_step(s->run, s->tr, rate, now - s->t0));
            if (rc != EXIT_OK) return rc;
        }
        report(s, a, step, loss, lr, gnorm, now);
        if (s->info.val_tokens && (step % a->eval_every == 0 || step == a->steps)) {
            double val = NAN;
            dtx_status er = dtx_trainer_eval(s->tr, &val);
            if (er != DTX_OK && er != DTX_ERR_STOPPED) { /* stopped: the top of the loop writes the checkpoint */
                bar_break(s);
                return lib_error(CMD);
            }
            if (er == DTX_OK) {
                say(s, "eval step %lld  val_loss %.4f\n", (long long)step, val);
                rc = lib_fail(s, dtx_run_log_eval(s->run, step, val, dtx_now_s() - s->t0));
                if (rc != EXIT_OK) return rc;
            }
        }
        if (a->ckpt_every > 0 && (step % a->ckpt_every == 0 || step == a->steps)) {
            if ((rc = write_ckpt(s)) != EXIT_OK) return rc;
            double took;
            const char *ck = dtx_run_last_checkpoint(s->run, NULL, &took);
            struct stat sb;
            double mb = stat(ck, &sb) == 0 ? (double)sb.st_size / 1e6 : NAN;
            say(s, "checkpoint step %lld: %s (%.1f MB, %.2f s)\n", (long long)step, ck, mb, took);
        }
        if (step == a->stop_after && step < a->steps) {
            if ((rc = write_ckpt(s)) != EXIT_OK) return rc;
            say(s, "stopped after step %lld (--stop-after); checkpoint written to %s; resume with --resume\n",
                (long long)step, last_ckpt(s, NULL));
            return LOOP_STOPPED;
        }
    }
    /* leave the final state on the screen */
    if (s->bar && a->steps > s->start_step) {
        dtx_trainer_info(s->tr, &s->info);
        draw_bar(s, a, a->steps, s->info.last_loss, s->last_lr, dtx_now_s());
    }
    bar_break(s);
    return LOOP_DONE;
}

/* ---------------------------------------------------------------- setup */

/* The trainer: from the newest checkpoint with --resume, else fresh (or
 * from --init). init_model is the --init model (taken or freed). */
static int start_trainer(train_state *s, train_args *a, const dtx_config *cfg, dtx_model *init_model) {
    const char *path = dtx_run_resume_path(s->run);
    dtx_status st;
    a->to.stop = &g_signal;
    if (path) {
        dtx_model_free(init_model);
        st = dtx_trainer_init_checkpoint(&s->tr, &a->to, a->tokens, a->val_tokens, path, cfg, &a->opt);
        if (st == DTX_ERR_USAGE) return resume_refused(path, a);
    } else {
        st = dtx_trainer_init(&s->tr, &a->to, a->tokens, a->val_tokens, cfg, init_model, &a->opt);
    }
    if (st) return lib_fail(s, st);
    dtx_trainer_info(s->tr, &s->info);
    s->start_step = s->info.start_step;
    if (s->info.ckpt_threads && s->info.ckpt_threads != omp_get_max_threads())
        say(s, "note: %s was written by a run with %d threads, this one has %d: the result may differ in the last "
            "bits from an uninterrupted run\n", path, s->info.ckpt_threads, omp_get_max_threads());
    if (s->info.extended_from) /* docs/training.md "Extending a run" */
        say(s, "extending the run from %lld to %lld steps: the schedule restarts at step %lld (lr %g back up to %g, "
            "then down to %g at the last step)\n", (long long)s->info.extended_from, (long long)a->steps,
            (long long)s->start_step, s->info.restart_lr, a->opt.lr, a->opt.min_lr);
    return EXIT_OK;
}

static void print_header(train_state *s, const train_args *a) {
    const dtx_config *c = dtx_model_config(dtx_trainer_model(s->tr));
    char variant[96] = "", li[40];
    if (!dtx_config_is_default_variant(c)) {
        dtx_config_lambda_init_str(c, li, sizeof li);
        if (c->arch == DTX_ARCH_DIFF2)
            snprintf(variant, sizeof variant, " (v2_lambda %s)", dtx_config_v2_lambda_name(c));
        else
            snprintf(variant, sizeof variant, " (subln %s%s%s)", dtx_config_subln_name(c),
                     c->arch == DTX_ARCH_DIFF ? ", lambda_init " : "", c->arch == DTX_ARCH_DIFF ? li : "");
    }
    say(s,
        "model %s%s  dim %lld  layers %lld  heads %lld  kv_heads %lld  vocab %lld  ffn %lld  max_seq %lld  %s  "
        "%zu params%s%s\n",
        dtx_arch_name(c->arch), variant, (long long)c->dim, (long long)c->n_layers, (long long)c->n_heads,
        (long long)c->n_kv_heads, (long long)c->vocab_size, (long long)c->ffn_dim, (long long)c->max_seq_len,
        c->tie_embeddings ? "tied" : "untied", dtx_model_num_params(dtx_trainer_model(s->tr)), a->init ? "  from " : "",
        a->init ? a->init : "");
    const dtx_train_options *o = &a->to;
    say(s, "data %s: %lld tokens  batch %lld x seq %lld x accum %lld = %lld tokens/step  %lld steps\n", a->tokens,
        (long long)s->info.data_tokens, (long long)o->batch, (long long)o->seq, (long long)o->accum,
        (long long)(o->batch * o->seq * o->accum), (long long)a->steps);
    if (a->val_tokens)
        say(s, "val %s: %lld tokens  every %lld steps on %lld batches\n", a->val_tokens, (long long)s->info.val_tokens,
            (long long)a->eval_every, (long long)o->eval_batches);
    if (o->diff_warmup > 0)
        say(s, "diff warmup: transformer_mix %g now, 1 - step/%lld before each step, 0 (a standard DIFF model) from "
            "step %lld\n", c->transformer_mix, (long long)o->diff_warmup, (long long)o->diff_warmup);
    else if (c->transformer_mix > 0)
        say(s, "note: transformer_mix %g (a converted Transformer): without --diff-warmup N the DIFF form (per-head "
            "norm, lambda_init) stays out; docs/huggingface.md\n", c->transformer_mix);
    char keep[48] = "all";
    if (a->keep > 0) snprintf(keep, sizeof keep, "the newest %lld", (long long)a->keep);
    if (a->ckpt_every > 0)
        say(s, "checkpoints every %lld steps in %s, keeping %s\n", (long long)a->ckpt_every, a->ckpt_dir, keep);
    if (dtx_run_resume_path(s->run))
        say(s, "resumed from %s at step %lld (loss %.4f)\n", dtx_run_resume_path(s->run), (long long)s->start_step,
            s->info.start_loss);
    else if (a->resume)
        say(s, "no checkpoint in %s: starting at step 0\n", a->ckpt_dir);
}

static int run(train_args *a, flag *fl, int n_fl) {
    static train_state s;
    memset(&s, 0, sizeof s);
    s.bar = isatty(STDERR_FILENO);
    s.lines = !s.bar || !isatty(STDOUT_FILENO);
    /* under mpirun: data-parallel ranks (rank 0 speaks and writes; docs/training.md) */
    dtx_comm *comm = NULL;
    if (dtx_comm_launched_by_mpi() && dtx_comm_mpi_open(&comm) != DTX_OK) {
        cli_print_held(); /* a rank's own trouble: said by every rank */
        cli_hold_messages(0);
        return lib_error(CMD);
    }
    const int rank = dtx_comm_rank(comm), ranks = dtx_comm_size(comm);
    if (rank > 0) s.quiet = 1, s.bar = 0, s.lines = 0;
    cli_set_rank(rank, ranks);
    dtx_run_options ro = {.out = a->out, .ckpt_dir = a->ckpt_dir, .keep = a->keep, .log = a->log_path,
                          .resume = a->resume, .read_only = rank > 0};
    int rc = lib_fail(&s, dtx_run_open(&s.run, &ro));
    dtx_model *init_model = NULL;
    dtx_config cfg = a->cfg;
    if (rc == EXIT_OK && a->init) {
        if (dtx_model_open(&init_model, a->init, DTX_PREC_FP32) != DTX_OK) rc = lib_error(CMD);
        else if (dtx_model_wquant(init_model) != DTX_WQ_NONE)
            rc = runtime_error(CMD, "--init %s is a quantised model (%s): quantised models are for inference; "
                               "train the fp32 model it came from", a->init, dtx_wquant_name(dtx_model_wquant(init_model)));
        else {
            cfg = *dtx_model_config(init_model);
            rc = extend_context(a, fl, n_fl, &init_model, &cfg);
            if (rc == EXIT_OK) rc = check_seq(a, fl, n_fl, &cfg);
        }
    }
    a->to.comm = comm;
    if (rc == EXIT_OK) {
        rc = start_trainer(&s, a, &cfg, init_model);
        init_model = NULL;
    }
    dtx_model_free(init_model);
    if (rc == EXIT_OK) cli_note_precision(a->precision);
    if (rc == EXIT_OK) rc = lib_fail(&s, dtx_run_start_log(s.run, s.tr));
    /* every rank is here: agree whether all are ready; a failure rank 0 shares was said by rank 0, one
     * it does not share is said by the rank that has it; the others stop quietly */
    if (ranks > 1) {
        double v[2] = {rc != EXIT_OK, rank == 0 && rc != EXIT_OK};
        if (dtx_comm_allreduce_f64(comm, v, 2) != DTX_OK) v[0] = 1;
        cli_hold_messages(0);
        if (rc != EXIT_OK && rank > 0 && v[1] == 0) cli_print_held();
        if (v[0] > 0 && rc == EXIT_OK) rc = EXIT_RUNTIME;
    }
    int stepping = rc == EXIT_OK; /* from here a rank that fails leaves the others waiting */
    if (rc == EXIT_OK) {
        print_header(&s, a);
        if (comm)
            say(&s, "ranks %d (MPI): %lld of the %lld rows of each batch on each; the gradient summed %s\n", ranks,
                (long long)(a->to.batch / ranks), (long long)a->to.batch,
                s.info.grad_bucket ? "in buckets during the backward" : "after the backward");
        struct sigaction old_int, old_term;
        install_signals(&old_int, &old_term);
        rc = train_loop(&s, a);
        if (rc == LOOP_DONE && s.quiet) rc = EXIT_OK; /* rank 0 saves the model */
        else if (rc == LOOP_DONE) {
            g_writing = 1;
            dtx_status st = dtx_run_save_model(s.run, s.tr, a->bf16);
            g_writing = 0;
            if (st != DTX_OK) {
                rc = lib_error(CMD);
            } else {
                const dtx_train_mix *x = &a->to.mix;
                dtx_train_info *i = &s.info;
                dtx_trainer_info(s.tr, i);
                if (x->needle_frac > 0 || x->copy_frac > 0)
                    say(&s, "mixture: %lld needle documents and %lld copy documents among the rows of this run\n",
                        (long long)i->needle_docs, (long long)i->copy_docs);
                if (x->icl_frac > 0 || x->halluc_frac > 0 || x->fact_frac > 0)
                    say(&s, "mixture: %lld in-context episodes, %lld faithfulness documents and %lld fact rows\n",
                        (long long)i->icl_rows, (long long)i->halluc_rows, (long long)i->fact_rows);
                if (x->recall_frac > 0)
                    say(&s, "mixture: %lld associative recall episodes\n", (long long)i->recall_rows);
                say(&s, "final loss %.4f\nsaved %s\n", i->last_loss, a->out);
                rc = finish_stdout(CMD);
            }
        } else if (rc == LOOP_STOPPED) rc = finish_stdout(CMD);
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
    }
    /* a rank that cannot go on would leave the others waiting in a sum: stop them all (before the state is
     * freed: its thread of the gradient's sums may be waiting in one too) */
    if (stepping && ranks > 1 && rc != EXIT_OK && rc != 128 + SIGINT && rc != 128 + SIGTERM)
        dtx_comm_abort(comm, rc);
    state_free(&s);
    dtx_comm_mpi_close(comm);
    return rc;
}

int cmd_train(int argc, char **argv) {
    /* under a launcher, ranks other than 0 keep their setup messages until they know rank 0's lot */
    const char *r = getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK") : getenv("PMIX_RANK");
    if (r && atoi(r) > 0) cli_hold_messages(1);
    train_args a;
    set_defaults(&a);
    const int64_t BIG = INT64_MAX, SIZE = 1 << 20, BATCH = 1 << 16;
    flag fl[] = {
        FLAG_TEXT("data and output:\n"),
        FLAG_STR("--tokens", &a.tokens, .metavar = "FILE",
                 .help = "token ids (a token shard, or whitespace-separated text) [required]"),
        FLAG_STR("--out", &a.out, .metavar = "PATH",
                 .help = "where to save the final model (safetensors) [required]"),
        FLAG_BOOL("--bf16", &a.bf16, 1, .help = "save BF16 tensors (default F32)"),
        FLAG_STR("--init", &a.init, .metavar = "MODEL",
                 .help = "continue from the weights of MODEL (fresh optimizer state); the model flags below are "
                         "then refused, but for --max-seq and --rope-theta (extending the context)"),
        FLAG_REAL("--needle-frac", &a.to.mix.needle_frac, 0, 0, 1, 0, .metavar = "P",
                  .help = "replace each batch row, with probability P, by a synthetic multi-needle retrieval "
                          "document of --seq + 1 tokens (0: off; docs/eval_needle.md); needs --needle-text and "
                          "--needle-tokenizer"),
        FLAG_STR("--needle-text", &a.to.mix.text, .metavar = "PATH",
                 .help = "the documents' haystack: training text (a file or a folder of *.txt), never the text "
                         "needle evaluation uses"),
        FLAG_STR("--needle-tokenizer", &a.to.mix.tokenizer, .metavar = "F",
                 .help = "the tokenizer the token file was made with"),
        FLAG_INT("--needle-max", &a.to.mix.needle_max, 1, DTX_NEEDLE_MAX, .metavar = "N",
                 .help = "needles per document, 1 to N uniformly"),
        FLAG_REAL("--copy-frac", &a.to.mix.copy_frac, 0, 0, 1, 0, .metavar = "P",
                  .help = "make each remaining row, with probability P, a copy document: L random ids "
                          "(16 <= L <= seq/4) repeated to fill it"),
        FLAG_REAL("--icl-frac", &a.to.mix.icl_frac, 0, 0, 1, 0, .metavar = "P",
                  .help = "a further share of rows: in-context classification episodes (docs/eval_icl.md); needs "
                          "--needle-tokenizer"),
        FLAG_REAL("--halluc-frac", &a.to.mix.halluc_frac, 0, 0, 1, 0, .metavar = "P",
                  .help = "a further share: faithfulness documents (list every number, absent cities answered "
                          "'none'; docs/eval_halluc.md)"),
        FLAG_REAL("--fact-frac", &a.to.mix.fact_frac, 0, 0, 1, 0, .metavar = "P",
                  .help = "a further share: closed-book fact rows; needle documents then leave out the fact "
                          "cities"),
        FLAG_REAL("--recall-frac", &a.to.mix.recall_frac, 0, 0, 1, 0, .metavar = "P",
                  .help = "a further share: multi-query associative recall episodes of token ids (key-value "
                          "pairs, then queries; docs/eval_recall.md)"),
        FLAG_INT("--recall-queries", &a.to.mix.recall_queries, 1, 1024, .metavar = "Q",
                 .help = "queries per recall episode (default 8)"),
        FLAG_INT("--recall-distractors", &a.to.mix.recall_distractors, 0, 2047, .metavar = "D",
                 .help = "distractor pairs (never asked) per recall episode, 0 to D uniformly (default 24)"),
        FLAG_CHOICE("--recall-loss", &a.recall_loss, "answers|all",
                    .help = "grade a recall row at its answers only (the default) or at every position"),
        FLAG_INT("--diff-warmup", &a.to.diff_warmup, 0, BIG, .metavar = "N",
                 .help = "with --init of a converted Transformer (difftx convert --to-diff): phase the DIFF form in "
                         "over the first N steps (transformer_mix 1 - step/N: the per-head norm and the lambda_init "
                         "schedule; docs/huggingface.md)"),
        FLAG_TEXT("\nmodel (new models only):\n"),
        FLAG_CHOICE("--arch", &a.arch, "diff|transformer|diff2",
                    .help = "diff2: DIFF V2 (2h query heads, per-token sigmoid lambda, no per-head norm; README "
                            "\"Model\")"),
        FLAG_INT("--dim", &a.cfg.dim, 1, SIZE, .metavar = "N", .help = "model width"),
        FLAG_INT("--layers", &a.cfg.n_layers, 1, SIZE, .metavar = "N", .help = "blocks"),
        FLAG_INT("--heads", &a.cfg.n_heads, 1, SIZE, .metavar = "N", .help = "attention heads"),
        FLAG_INT("--kv-heads", &a.cfg.n_kv_heads, 1, SIZE, .metavar = "N", .help = "key/value heads (default: --heads)"),
        FLAG_INT("--vocab", &a.cfg.vocab_size, 1, INT32_MAX, .metavar = "N", .help = "vocabulary size"),
        FLAG_INT("--ffn", &a.cfg.ffn_dim, 1, SIZE, .metavar = "N", .help = "SwiGLU hidden width"),
        FLAG_INT("--max-seq", &a.cfg.max_seq_len, 1, SIZE, .metavar = "N",
                 .help = "the model's context (default: --seq when given, else 256)"),
        FLAG_REAL("--rope-theta", &a.cfg.rope_theta, 0, 1, INFINITY, 0, .metavar = "X", .help = "RoPE's base"),
        FLAG_REAL("--norm-eps", &a.cfg.norm_eps, 0, 1, 1, 1, .metavar = "X", .help = "every RMSNorm's epsilon"),
        FLAG_BOOL("--tie", &a.cfg.tie_embeddings, 1,
                  .help = "share the output projection with the token embedding (the default)"),
        FLAG_BOOL("--no-tie", &a.cfg.tie_embeddings, 0, .help = "a separate output projection"),
        FLAG_CHOICE("--subln", &a.subln, "rms|none",
                    .help = "per-head RMSNorm of the attention output (default diff: rms, transformer: none; Table "
                            "6's -/+ GroupNorm)"),
        FLAG_STR("--lambda-init", &a.lambda_init, .metavar = "schedule|X",
                 .help = "diff: lambda_init 0.8 - 0.6 exp(-0.3 l) per layer (schedule, the default) or X in [0, 1) "
                         "in every layer"),
        FLAG_CHOICE("--v2-lambda", &a.v2_lambda, "sigmoid|linear|none",
                    .help = "diff2: lambda = sigmoid(x W) (the default), x W without the sigmoid, or 1 with no "
                            "lambda_proj (the V2 ablations)"),
        FLAG_CHOICE("--init-scheme", &a.init_scheme, "torch|gpt2",
                    .help = "initial weights: PyTorch nn.Linear's U(+-1/sqrt(in)) and N(0, 1/dim) embeddings "
                            "(torch, the default), or N(0, 0.02^2) with the residual projections /sqrt(2 layers) "
                            "(gpt2); README \"Model\""),
        FLAG_TEXT("  (the Transformer with half the heads at twice the width: --arch transformer\n"
                  "   --heads H with H the diff model's heads; docs/training.md \"Variants\")\n"),
        FLAG_TEXT("\nbatches:\n"),
        FLAG_INT("--steps", &a.steps, 1, BIG, .metavar = "N", .help = "optimizer steps; also the schedule length"),
        FLAG_INT("--batch", &a.to.batch, 1, BATCH, .metavar = "N", .help = "windows per micro-batch"),
        FLAG_INT("--seq", &a.to.seq, 1, SIZE, .metavar = "N", .help = "tokens per window (default: the model's max_seq_len)"),
        FLAG_INT("--accum", &a.to.accum, 1, BATCH, .metavar = "N", .help = "micro-batches accumulated per step"),
        DTX_FLAG_SEED_OF(&a.to.seed, "seeds the initial weights and the batch sampler"),
        FLAG_TEXT("\noptimizer:\n"),
        FLAG_REAL("--lr", &a.opt.lr, 0, 1, INFINITY, 0, .metavar = "X", .help = "the peak learning rate"),
        FLAG_REAL("--min-lr", &a.opt.min_lr, 0, 0, INFINITY, 0, .metavar = "X",
                  .help = "the rate at the last step (default: --lr / 10)"),
        FLAG_INT("--warmup", &a.opt.warmup_steps, 0, BIG, .metavar = "N", .help = "linear warmup steps"),
        FLAG_CHOICE("--schedule", &a.schedule, "cosine|linear|constant", .help = "the decay after the warmup"),
        FLAG_REAL("--wd", &a.opt.weight_decay, 0, 0, INFINITY, 0, .metavar = "X",
                  .help = "decoupled weight decay (never on norms, subln or lambda vectors)"),
        FLAG_BOOL("--decay-embeddings", &a.opt.decay_embeddings, 1, .help = "weight decay on the embeddings too"),
        FLAG_REAL("--beta1", &a.opt.beta1, 0, 0, 1, 1, .metavar = "X", .help = "AdamW's first-moment decay"),
        FLAG_REAL("--beta2", &a.opt.beta2, 0, 0, 1, 1, .metavar = "X", .help = "AdamW's second-moment decay"),
        FLAG_REAL("--adam-eps", &a.opt.eps, 0, 1, INFINITY, 0, .metavar = "X", .help = "AdamW's epsilon"),
        FLAG_REAL("--clip", &a.opt.clip_norm, 0, 0, INFINITY, 0, .metavar = "X",
                  .help = "global gradient-norm clip; 0 disables"),
        DTX_FLAG_PRECISION(&a.precision),
        FLAG_TEXT("\nvalidation and logging:\n"),
        FLAG_STR("--val-tokens", &a.val_tokens, .metavar = "FILE",
                 .help = "validation tokens (shard or text); the validation loss is the mean over --eval-batches "
                         "batches read in order from its start"),
        FLAG_INT("--eval-every", &a.eval_every, 1, BIG, .metavar = "N", .help = "validate every N steps and after the last"),
        FLAG_INT("--eval-batches", &a.to.eval_batches, 1, SIZE, .metavar = "N",
                 .help = "batches of --batch x --seq tokens per validation"),
        FLAG_STR("--log", &a.log_path, .metavar = "FILE.jsonl",
                 .help = "one JSON object per step (and per validation, checkpoint)"),
        FLAG_INT("--log-steps", &a.log_steps, 1, BIG, .metavar = "N",
                 .help = "write a step line to --log every N steps and at the last (default 1: every step)"),
        FLAG_INT("--log-every", &a.log_every, 1, BIG, .metavar = "N",
                 .help = "print a progress line every N steps; with stderr on a terminal a progress bar is redrawn "
                         "there (and the lines go only to a stdout that is not a terminal)"),
        FLAG_TEXT("\ncheckpoints (model, optimizer state, sampler state; resume is bit-identical):\n"),
        FLAG_STR("--ckpt-dir", &a.ckpt_dir_flag, .metavar = "DIR",
                 .help = "where checkpoints go (default: the --out path + .ckpt)"),
        FLAG_INT("--ckpt-every", &a.ckpt_every, 0, BIG, .metavar = "N",
                 .help = "write a checkpoint every N steps and after the last; 0 (the default) writes one only on "
                         "Ctrl-C or --stop-after"),
        FLAG_INT("--keep", &a.keep, 0, BIG, .metavar = "K", .help = "keep the newest K checkpoints; 0 keeps all"),
        FLAG_BOOL("--resume", &a.resume, 1,
                  .help = "continue from the newest checkpoint in --ckpt-dir (start from step 0 if there is none); "
                          "the settings that decide the result (model, optimizer, batches, seed, precision, data) "
                          "must match the checkpoint; a larger --steps extends the run (docs/training.md)"),
        FLAG_INT("--stop-after", &a.stop_after, 1, BIG, .metavar = "N",
                 .help = "end the run cleanly after step N, writing a checkpoint, as if interrupted (for tests and "
                         "job schedulers)"),
        FLAG_BOOL("--zero1", &a.to.zero1, 1,
                  .help = "under mpirun: each rank keeps the AdamW moments of its own share of the parameters "
                          "(ZeRO-1); the same results"),
        FLAG_REAL("--grad-bucket-mb", &a.to.grad_bucket_mb, 0, 0, 1 << 20, 0, .metavar = "M",
                  .help = "under mpirun: sum the gradient over ranks in buckets of M MiB, each started while the "
                          "backward pass still runs; 0 sums it at once after the backward (the default: 4 where "
                          "ranks run on more than one machine, else 0)"),
        /* test hooks (docs/training.md "Test hooks"), not listed: the loss of this step reads as NaN; */
        FLAG_INT("--debug-nan-at", &a.to.debug_nan_at, 1, BIG),
        /* and: this step fails as out of memory on the last rank alone (the others wait in a sum) */
        FLAG_INT("--debug-oom-at", &a.to.debug_oom_at, 1, BIG),
        FLAG_TEXT("\nCtrl-C (or SIGTERM) finishes the current step, writes a checkpoint and exits with\n"
                  "status 130 (143); a second one quits at once (an unfinished checkpoint write\n"
                  "completes first). A NaN or infinite loss stops the run with status 1.\n"),
    };
    int n_fl = (int)(sizeof fl / sizeof fl[0]);
    switch (flags_parse(CMD, USAGE, fl, n_fl, argc, argv, NULL, 0, NULL)) {
    case FLAGS_HELP: return finish_stdout(CMD);
    case FLAGS_ERROR: return EXIT_USAGE;
    }
    int rc = check_flags(&a, fl, n_fl);
    return rc != EXIT_OK ? rc : run(&a, fl, n_fl);
}
