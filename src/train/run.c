/* The run folder (difftx.h "run folders"): the model file's lock, the
 * checkpoint files (names, listing, the remains of killed writes, pruning)
 * and the JSON-lines log, for every driver of the trainer. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "common/json.h"
#include "difftx.h"
#include "train/comm.h"
#include "train/trainer.h"

/* the paths given (PATH_IN), and those made from them (PATH_CAP) */
enum { PATH_IN = 4096, PATH_CAP = PATH_IN + 128 };

struct dtx_run {
    char out[PATH_IN], ckpt_dir[PATH_IN + 8], log_path[PATH_IN];
    int64_t keep;
    int resume, read_only, has_log;
    char lock_path[PATH_CAP];
    int lock_fd; /* -1: not held */
    char resume_path[PATH_CAP];
    int64_t resume_step; /* -1: a fresh run */
    FILE *log;
    char last_ckpt[PATH_CAP];
    int64_t last_ckpt_step; /* -1: none */
    double last_ckpt_s;
};

/* ------------------------------------------------------------ checks */

/* The output must name a file (not a folder) in a writable folder. */
static dtx_status check_out(const char *out) {
    struct stat osb;
    size_t len = strlen(out);
    if ((stat(out, &osb) == 0 && S_ISDIR(osb.st_mode)) || (len && out[len - 1] == '/'))
        return dtx_fail(DTX_ERR_USAGE, "--out %s: a folder; name the model file to write (e.g. %s%smodel.safetensors)",
                        out, out, len && out[len - 1] == '/' ? "" : "/");
    char dir[PATH_CAP];
    const char *slash = strrchr(out, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == out) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - out), out);
    struct stat sb;
    if (stat(dir, &sb) != 0 || access(dir, W_OK) != 0)
        return dtx_fail(DTX_ERR_IO, "--out %s: cannot write to folder '%s': %s", out, dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return dtx_fail(DTX_ERR_IO, "--out %s: cannot write to '%s': not a folder", out, dir);
    return DTX_OK;
}

/* The checkpoint folder either exists (a writable folder) or can be made:
 * its nearest existing ancestor is a writable folder. */
static dtx_status check_ckpt_dir(const char *dir) {
    char p[PATH_CAP];
    snprintf(p, sizeof p, "%s", dir);
    for (;;) {
        struct stat sb;
        if (stat(p, &sb) == 0) {
            if (!S_ISDIR(sb.st_mode))
                return dtx_fail(DTX_ERR_IO, "--ckpt-dir %s: cannot create it: '%s' is not a folder", dir, p);
            if (access(p, W_OK) != 0)
                return dtx_fail(DTX_ERR_IO, "--ckpt-dir %s: cannot write to folder '%s': %s", dir, p, strerror(errno));
            return DTX_OK;
        }
        /* ENOTDIR: a component is a file, reported when the walk reaches it */
        if (errno != ENOENT && errno != ENOTDIR) return dtx_fail(DTX_ERR_IO, "--ckpt-dir %s: %s: %s", dir, p, strerror(errno));
        char *slash = strrchr(p, '/');
        while (slash && slash > p && slash[1] == '\0') { /* trailing slashes */
            *slash = '\0';
            slash = strrchr(p, '/');
        }
        if (!slash) snprintf(p, sizeof p, ".");
        else if (slash == p) snprintf(p, sizeof p, "/");
        else *slash = '\0';
    }
}

/* mkdir -p. Returns 0, or an errno value with the folder that failed in bad. */
static int make_dirs(const char *dir, char *bad, size_t cap) {
    char p[PATH_CAP];
    snprintf(p, sizeof p, "%s", dir);
    for (char *q = p + 1;; q++) {
        if (*q != '/' && *q != '\0') continue;
        char c = *q;
        *q = '\0';
        struct stat sb;
        if (mkdir(p, 0777) != 0 && (errno != EEXIST || stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))) {
            int e = errno == EEXIST ? ENOTDIR : errno;
            snprintf(bad, cap, "%s", p);
            return e;
        }
        *q = c;
        if (c == '\0') break;
    }
    return 0;
}

/* ------------------------------------------------------------ checkpoint files */

/* "ckpt_<digits>.safetensors" -> its step; -1 for any other name. */
static int64_t ckpt_step_of(const char *name) {
    static const char pre[] = "ckpt_", suf[] = ".safetensors";
    size_t n = strlen(name), lp = sizeof pre - 1, ls = sizeof suf - 1;
    if (n <= lp + ls || strncmp(name, pre, lp) != 0 || strcmp(name + n - ls, suf) != 0) return -1;
    int64_t v = 0;
    for (size_t i = lp; i < n - ls; i++) {
        if (name[i] < '0' || name[i] > '9' || v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (name[i] - '0');
    }
    return v;
}

static void ckpt_path(char *buf, size_t cap, const char *dir, int64_t step) {
    snprintf(buf, cap, "%s/ckpt_%08lld.safetensors", dir, (long long)step);
}

static int cmp_desc(const void *x, const void *y) {
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* A temporary file of a checkpoint write whose process is gone. */
static int stale_tmp(const char *name) {
    const char *tmp = strstr(name, ".safetensors.tmp.");
    if (!tmp || strncmp(name, "ckpt_", 5) != 0) return 0;
    long pid = strtol(tmp + strlen(".safetensors.tmp."), NULL, 10);
    return pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* The steps of the checkpoints in dir, newest first (malloc'd; *n may be 0);
 * with clean, also removes the temporary files of killed checkpoint writes.
 * A folder that does not exist holds none. */
static dtx_status list_ckpts(const char *dir, int64_t **steps, int *n, int clean) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? DTX_OK : dtx_fail(DTX_ERR_IO, "--ckpt-dir %s: %s", dir, strerror(errno));
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s = ckpt_step_of(e->d_name);
        if (s < 0) {
            if (clean && stale_tmp(e->d_name)) {
                char p[PATH_CAP + 256];
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                unlink(p);
            }
            continue;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *ns = realloc(*steps, (size_t)cap * sizeof **steps);
            if (!ns) {
                closedir(d);
                free(*steps);
                *steps = NULL;
                return dtx_fail(DTX_ERR_NOMEM, "out of memory listing %s", dir);
            }
            *steps = ns;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (*n) qsort(*steps, (size_t)*n, sizeof **steps, cmp_desc);
    return DTX_OK;
}

/* Removes all but the newest `keep` checkpoints; a file that cannot be
 * removed stays (the next prune tries again). */
static void prune(const dtx_run *r) {
    if (r->keep <= 0) return;
    int64_t *steps;
    int n;
    if (list_ckpts(r->ckpt_dir, &steps, &n, 0) != DTX_OK) return;
    for (int i = (int)r->keep; i < n; i++) {
        char p[PATH_CAP + 64];
        ckpt_path(p, sizeof p, r->ckpt_dir, steps[i]);
        unlink(p);
    }
    free(steps);
}

/* ------------------------------------------------------------ opening */

/* Two runs writing one model, its checkpoints and its log would each undo the
 * other: the first to start holds OUT.lock until it ends (a killed run's lock
 * goes with it), and a second is refused. Not for an OUT that is not a
 * regular file (/dev/null). */
static dtx_status lock_out(dtx_run *r) {
    struct stat sb;
    if (stat(r->out, &sb) == 0 && !S_ISREG(sb.st_mode)) return DTX_OK;
    snprintf(r->lock_path, sizeof r->lock_path, "%s.lock", r->out);
    long holder;
    if (dtx_lock_acquire(r->lock_path, &r->lock_fd, &holder) == DTX_OK) return DTX_OK;
    if (!holder) return dtx_last_status();
    char why[1024]; /* dtx_fail writes the message dtx_last_error reads */
    snprintf(why, sizeof why, "%s", dtx_last_error());
    return dtx_fail(DTX_ERR_IO, "--out %s: another difftx train is writing it (%s)", r->out, why);
}

static dtx_status find_resume(dtx_run *r) {
    int64_t *steps = NULL;
    int n = 0;
    dtx_status st = list_ckpts(r->ckpt_dir, &steps, &n, !r->read_only);
    int64_t newest = n ? steps[0] : -1;
    free(steps);
    if (st) return st;
    if (n && !r->resume)
        return dtx_fail(DTX_ERR_IO,
                        "--ckpt-dir %s already holds checkpoints (the newest of step %lld): continue that run with "
                        "--resume, or remove them or choose another --ckpt-dir",
                        r->ckpt_dir, (long long)newest);
    if (n) {
        ckpt_path(r->resume_path, sizeof r->resume_path, r->ckpt_dir, newest);
        r->resume_step = newest;
        snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", r->resume_path);
        r->last_ckpt_step = newest;
    }
    return DTX_OK;
}

static int too_long(const char *s) { return strlen(s) >= PATH_IN; }

dtx_status dtx_run_open(dtx_run **out, const dtx_run_options *o) {
    *out = NULL;
    if (!o || !o->out || !o->out[0]) return dtx_fail(DTX_ERR_USAGE, "--out is required");
    if (too_long(o->out) || (o->ckpt_dir && too_long(o->ckpt_dir)) || (o->log && too_long(o->log)))
        return dtx_fail(DTX_ERR_USAGE, "a path of the run is longer than %d bytes", PATH_IN - 1);
    if (o->keep < 0) return dtx_fail(DTX_ERR_USAGE, "--keep: expected a non-negative integer, got %lld", (long long)o->keep);
    dtx_run *r = dtx_calloc(1, sizeof *r);
    if (!r) return DTX_ERR_NOMEM;
    snprintf(r->out, sizeof r->out, "%s", o->out);
    if (o->ckpt_dir) snprintf(r->ckpt_dir, sizeof r->ckpt_dir, "%s", o->ckpt_dir);
    else snprintf(r->ckpt_dir, sizeof r->ckpt_dir, "%s.ckpt", o->out);
    if (o->log) snprintf(r->log_path, sizeof r->log_path, "%s", o->log), r->has_log = 1;
    r->keep = o->keep, r->resume = o->resume, r->read_only = o->read_only;
    r->lock_fd = -1, r->resume_step = -1, r->last_ckpt_step = -1;
    dtx_status st = check_out(r->out);
    if (!st) st = check_ckpt_dir(r->ckpt_dir);
    if (!st && !r->read_only) st = lock_out(r);
    if (!st) st = find_resume(r);
    if (st) {
        dtx_run_close(r);
        return st;
    }
    *out = r;
    return DTX_OK;
}

const char *dtx_run_resume_path(const dtx_run *r) { return r->resume_step >= 0 ? r->resume_path : NULL; }
int64_t dtx_run_resume_step(const dtx_run *r) { return r->resume_step; }
const char *dtx_run_ckpt_dir(const dtx_run *r) { return r->ckpt_dir; }

const char *dtx_run_last_checkpoint(const dtx_run *r, int64_t *step, double *seconds) {
    if (step) *step = r ? r->last_ckpt_step : -1;
    if (seconds) *seconds = r ? r->last_ckpt_s : 0;
    return r && r->last_ckpt_step >= 0 ? r->last_ckpt : NULL;
}

void dtx_run_close(dtx_run *r) {
    if (!r) return;
    if (r->log) fclose(r->log);
    dtx_lock_release(r->lock_path, r->lock_fd);
    free(r);
}

/* ------------------------------------------------------------ the log */

/* One JSON object per line (the step first), flushed, so a killed run keeps
 * its log. begin makes a line's object (NULL when there is no log); end
 * writes it and deletes it. */
static cJSON *line_begin(const dtx_run *r, int64_t step, int *ok) {
    if (!r || !r->log) return NULL;
    cJSON *o = cJSON_CreateObject();
    *ok = o != NULL;
    if (o) jint(o, "step", step, ok);
    return o;
}

static dtx_status line_end(dtx_run *r, cJSON *o, int ok) {
    if (!r || !r->log) return DTX_OK;
    char *text = json_text(o, ok, 0);
    if (!text) return dtx_fail(DTX_ERR_NOMEM, "--log %s: out of memory building a line", r->log_path);
    errno = 0;
    int bad = fputs(text, r->log) == EOF || fflush(r->log) != 0;
    free(text);
    if (bad) return dtx_fail(DTX_ERR_IO, "--log %s: cannot write: %s", r->log_path, strerror(errno ? errno : EIO));
    return DTX_OK;
}

dtx_status dtx_run_start_log(dtx_run *r, const dtx_trainer *t) {
    if (!r || !r->has_log || r->read_only || r->log) return DTX_OK;
    int resumed = r->resume_step >= 0;
    r->log = fopen(r->log_path, resumed ? "a" : "w");
    if (!r->log) return dtx_fail(DTX_ERR_IO, "--log %s: cannot open: %s", r->log_path, strerror(errno));
    if (!resumed) return DTX_OK;
    int ok = 1;
    cJSON *o = line_begin(r, t->step, &ok);
    if (o) jstr(o, "resumed_from", r->resume_path, &ok);
    return line_end(r, o, ok);
}

dtx_status dtx_run_log_step(dtx_run *r, const dtx_trainer *t, double tokens_per_s, double elapsed_s) {
    int ok = 1;
    cJSON *o = line_begin(r, t->step, &ok);
    if (!o) return ok ? DTX_OK : line_end(r, o, ok);
    const dtx_step_stats *s = &t->last;
    jnum(o, "loss", s->loss, &ok);
    jnum(o, "lr", s->lr, &ok);
    jnum(o, "grad_norm", s->grad_norm, &ok);
    jnum(o, "tokens_per_s", tokens_per_s, &ok);
    jnum(o, "elapsed_s", elapsed_s, &ok);
    const copy_score *cs = &s->copy;
    if (cs->n_first && cs->n_repeat) { /* the induction score's parts (docs/training.md) */
        jint(o, "copy_rows", cs->rows, &ok);
        jnum(o, "copy_first", cs->first / (double)cs->n_first, &ok);
        jnum(o, "copy_repeat", cs->repeat / (double)cs->n_repeat, &ok);
    }
    const dtx_config *c = dtx_model_config(t->model);
    if (c->arch == DTX_ARCH_DIFF) { /* λ per layer over training (docs/training.md) */
        double *lam = malloc((size_t)c->n_layers * sizeof *lam);
        for (int64_t l = 0; lam && l < c->n_layers; l++) lam[l] = dtx_model_lambda(t->model, l);
        jadd(o, "lambda", lam ? jnum_array(lam, c->n_layers, 6) : NULL, &ok);
        free(lam);
    }
    if (dtx_comm_size(t->comm) > 1) { /* the time in the sums over ranks: the cost of more of them */
        jnum(o, "comm_s", s->comm_s, &ok);
        jnum(o, "grad_sum_s", s->grad_sum_s, &ok);
    }
    return line_end(r, o, ok);
}

dtx_status dtx_run_log_eval(dtx_run *r, int64_t step, double val_loss, double elapsed_s) {
    int ok = 1;
    cJSON *o = line_begin(r, step, &ok);
    if (o) {
        jnum(o, "val_loss", val_loss, &ok);
        jnum(o, "elapsed_s", elapsed_s, &ok);
    }
    return line_end(r, o, ok);
}

dtx_status dtx_run_log_error(dtx_run *r, int64_t step, double loss, const char *why) {
    int ok = 1;
    cJSON *o = line_begin(r, step, &ok);
    if (o) {
        jnum(o, "loss", loss, &ok);
        jstr(o, "error", why, &ok);
    }
    return line_end(r, o, ok);
}

/* ------------------------------------------------------------ writing */

dtx_status dtx_run_checkpoint(dtx_run *r, dtx_trainer *t) {
    int64_t step = t->step;
    if (r->last_ckpt_step == step) return DTX_OK;
    if (r->read_only) { /* a rank other than 0: takes part in gathering a sharded optimizer */
        r->last_ckpt_step = step;
        ckpt_path(r->last_ckpt, sizeof r->last_ckpt, r->ckpt_dir, step);
        return dtx_trainer_checkpoint(t, NULL, NULL, NULL, 0);
    }
    char path[PATH_CAP];
    int e = make_dirs(r->ckpt_dir, path, sizeof path);
    if (e) return dtx_fail(DTX_ERR_IO, "--ckpt-dir %s: cannot create '%s': %s", r->ckpt_dir, path, strerror(e));
    ckpt_path(path, sizeof path, r->ckpt_dir, step);
    dtx_run_meta *m = malloc(sizeof *m);
    if (!m) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    dtx_trainer_run_meta(t, m);
    double t0 = dtx_now_s();
    dtx_status st = dtx_trainer_checkpoint(t, path, m->keys, m->values, DTX_RUN_META_KEYS);
    free(m);
    r->last_ckpt_s = dtx_now_s() - t0;
    if (st) {
        char why[1024];
        snprintf(why, sizeof why, "%s", dtx_last_error());
        return dtx_fail(st, "writing the checkpoint of step %lld: %s", (long long)step, why);
    }
    r->last_ckpt_step = step;
    snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", path);
    prune(r);
    int ok = 1;
    cJSON *o = line_begin(r, step, &ok);
    if (o) jstr(o, "checkpoint", path, &ok);
    return line_end(r, o, ok);
}

dtx_status dtx_run_save_model(dtx_run *r, dtx_trainer *t, int bf16) {
    if (r->read_only) return dtx_fail(DTX_ERR_ARG, "the run was opened read-only");
    if (!t->model) return dtx_fail(DTX_ERR_ARG, "the trainer's model was taken: nothing to save");
    dtx_status st = dtx_model_save(t->model, r->out, bf16);
    if (st == DTX_OK) return DTX_OK;
    char why[1024];
    snprintf(why, sizeof why, "%s", dtx_last_error());
    if (r->last_ckpt_step >= 0)
        return dtx_fail(st, "saving the model: %s (the checkpoint %s holds step %lld)", why, r->last_ckpt,
                        (long long)r->last_ckpt_step);
    return dtx_fail(st, "saving the model: %s", why);
}
