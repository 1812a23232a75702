/* difftx train as a process: checkpoints and bit-identical resume, Ctrl-C,
 * NaN losses, write failures, the JSONL log, validation and the progress
 * bar on a terminal (docs/training.md). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "difftx.h"
#include "io/safetensors.h"
#include "test.h"
#include "train/checkpoint.h"

/* ------------------------------------------------------------ helpers */

/* The line of cli_out that starts with prefix (copied to line), or 0. */
static int line_with(const char *prefix, char *line, size_t cap) {
    for (const char *p = cli_out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, prefix, strlen(prefix)) != 0) continue;
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        snprintf(line, cap, "%.*s", (int)n, p);
        return 1;
    }
    return 0;
}

/* A one-line message: exit code, "difftx train: " and the strings. */
#define CHECK_MSG(rc, want_rc, s1, s2)                                                                   \
    do {                                                                                                 \
        int rc_ = (rc);                                                                                  \
        char line_[4096] = "";                                                                           \
        CHECKF(rc_ == (want_rc), "exit %d, want %d: %s", rc_, (want_rc), cli_out);                       \
        CHECKF(line_with("difftx train: ", line_, sizeof line_), "no message: %s", cli_out);             \
        CHECKF(strstr(line_, s1) && strstr(line_, s2), "want '%s' and '%s' in: %s", s1, s2, line_);      \
    } while (0)

/* One whole-output line (nothing else printed): usage errors and refusals
 * before training. */
#define CHECK_ONLY(rc, want_rc, s1, s2)                                                                            \
    do {                                                                                                           \
        CHECK_MSG(rc, want_rc, s1, s2);                                                                            \
        const char *nl_ = strchr(cli_out, '\n');                                                                   \
        CHECKF(strncmp(cli_out, "difftx train: ", 14) == 0 && nl_ && nl_[1] == '\0', "not one line: %s", cli_out); \
    } while (0)

static int exists(const char *p) { return access(p, F_OK) == 0; }

static const char *ckpt(const char *dir, long long step) {
    static char buf[8][1024];
    static int i;
    char *p = buf[i++ % 8];
    snprintf(p, 1024, "%s/ckpt_%08lld.safetensors", dir, step);
    return p;
}

/* Names in dir (space-separated, sorted), for checking what is left. */
static const char *listing(const char *dir) {
    static char buf[4096];
    struct dirent **ents;
    buf[0] = '\0';
    int n = scandir(dir, &ents, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        if (ents[i]->d_name[0] != '.')
            snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", buf[0] ? " " : "", ents[i]->d_name);
        free(ents[i]);
    }
    if (n >= 0) free(ents);
    return buf;
}

/* 3000 pseudo-random ids in [0, 16) with some structure (a noisy period-8
 * pattern), as text and as a shard of the same ids. */
static void data_files(const char **txt, const char **bin, const char **val) {
    static char t[512], b[512], v[512];
    if (!t[0]) {
        enum { N = 3000, NV = 500 };
        static int32_t ids[N];
        dtx_rng r;
        dtx_rng_seed(&r, 4);
        for (int i = 0; i < N; i++) ids[i] = dtx_rng_next(&r) % 4 == 0 ? (int32_t)(dtx_rng_next(&r) % 16) : i % 8 + 1;
        char *text = malloc(N * 4);
        size_t k = 0;
        for (int i = 0; i < N; i++) k += (size_t)sprintf(text + k, "%d%c", ids[i], i % 20 == 19 ? '\n' : ' ');
        snprintf(t, sizeof t, "%s", test_path("train.txt"));
        snprintf(b, sizeof b, "%s", test_path("train.bin"));
        snprintf(v, sizeof v, "%s", test_path("val.bin"));
        int ok = write_file(t, text, k) == 0 && dtx_shard_write(b, ids, N, 16) == DTX_OK &&
                 dtx_shard_write(v, ids + 1234, NV, 16) == DTX_OK;
        free(text);
        if (!ok) t[0] = '\0';
    }
    *txt = t[0] ? t : NULL;
    *bin = b;
    *val = v;
}

static const char *TINY = "--dim 32 --layers 2 --heads 2 --vocab 16 --ffn 64 --seq 16 --batch 4";

/* Starts difftx with args (shell-quoted), stdout and stderr going to the file
 * log; fsize > 0 limits the size of the files it writes (SIGXFSZ ignored, so
 * a write fails with EFBIG as on a full disk). Returns the pid. */
static pid_t spawn(const char *args, const char *log, long fsize) {
    const char *bin = getenv("DIFFTX_BIN");
    if (!bin) bin = "build/difftx";
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "exec %s %s", bin, args);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(126);
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
        if (fsize > 0) {
            signal(SIGXFSZ, SIG_IGN); /* stays ignored across exec */
            struct rlimit lim;
            getrlimit(RLIMIT_FSIZE, &lim);
            lim.rlim_cur = (rlim_t)fsize;
            setrlimit(RLIMIT_FSIZE, &lim);
        }
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits for pid; its exit status, 128 + signal when killed, -1 on error. */
static int wait_exit(pid_t pid) {
    int st;
    if (waitpid(pid, &st, 0) != pid) return -1;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
}

/* Reads a file into cli_out. */
static void slurp(const char *path) {
    cli_out[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t n = fread(cli_out, 1, sizeof cli_out - 1, f);
    cli_out[n] = '\0';
    fclose(f);
}

static int run_limited(const char *args, long fsize) {
    const char *log = test_path("limited.out");
    int rc = wait_exit(spawn(args, log, fsize));
    slurp(log);
    return rc;
}

/* Parses every line of a JSONL file; calls fn for each object. Returns the
 * number of lines, -1 when one does not parse or the file does not end in a
 * newline. */
static int each_json(const char *path, void (*fn)(const cJSON *, void *), void *ctx) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char line[8192];
    int n = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n') bad = 1;
        cJSON *j = cJSON_Parse(line);
        if (!j || !cJSON_IsObject(j)) bad = 1;
        else if (fn) fn(j, ctx);
        cJSON_Delete(j);
        n++;
    }
    fclose(f);
    return bad ? -1 : n;
}

/* ------------------------------------------------------------ resume */

/* An interrupted and resumed run ends with the same bytes as one that never
 * stopped: the final model, and the checkpoints both write. Three setups: a
 * text file with fp32 products; a shard with bf16 products, accumulation,
 * GQA, and validation and a log on the way; DIFF V2 with GQA. */
TEST(train_cli_resume_is_bit_identical) {
    const char *txt, *bin, *val;
    data_files(&txt, &bin, &val);
    REQUIRE(txt);
    char va[1024];
    snprintf(va, sizeof va, "--val-tokens '%s' --eval-every 5 --eval-batches 2", val);
    struct {
        const char *data, *extra;
    } setups[] = {
        {txt, "--arch diff --lr 3e-3 --warmup 3 --copy-frac 0.3"}, /* the mixture is stateless */
        {bin, "--arch transformer --heads 4 --kv-heads 2 --precision bf16 --accum 2 --no-tie --lr 2e-3"},
        {txt, "--arch diff2 --heads 4 --kv-heads 2 --lr 3e-3 --warmup 3"},
    };
    for (int k = 0; k < 3; k++) {
        char a_out[512], b_out[512], a_dir[600], b_dir[600], common[4096], name[32];
        snprintf(name, sizeof name, "A%d.safetensors", k);
        snprintf(a_out, sizeof a_out, "%s", test_path(name));
        snprintf(name, sizeof name, "B%d.safetensors", k);
        snprintf(b_out, sizeof b_out, "%s", test_path(name));
        snprintf(a_dir, sizeof a_dir, "%s.ckpt", a_out);
        snprintf(b_dir, sizeof b_dir, "%s.ckpt", b_out);
        snprintf(common, sizeof common, "%s %s --tokens '%s' --steps 24 --ckpt-every 8 --seed 5 %s", TINY,
                 setups[k].extra, setups[k].data, k == 1 ? va : "");
        int rc = cli("train %s --out '%s' --keep 0", common, a_out);
        REQUIRE(rc == 0);
        CHECKF(strcmp(listing(a_dir), "ckpt_00000008.safetensors ckpt_00000016.safetensors ckpt_00000024.safetensors") ==
                   0,
               "%s", listing(a_dir));
        /* B: stopped after step 12, then resumed to the end; --keep 2 */
        rc = cli("train %s --out '%s' --keep 2 --stop-after 12 --log '%s/B.jsonl'", common, b_out, test_tmpdir());
        CHECKF(rc == 0 && cli_has("stopped after step 12 (--stop-after); checkpoint written to ") &&
                   cli_has("ckpt_00000012.safetensors; resume with --resume"),
               "%d: %s", rc, cli_out);
        CHECK(!exists(b_out));
        CHECK(strcmp(listing(b_dir), "ckpt_00000008.safetensors ckpt_00000012.safetensors") == 0);
        rc = cli("train %s --out '%s' --keep 2 --resume --log '%s/B.jsonl'", common, b_out, test_tmpdir());
        CHECKF(rc == 0 && cli_has("resumed from ") && cli_has("ckpt_00000012.safetensors at step 12"), "%d: %s", rc, cli_out);
        CHECKF(!cli_has("step 5/24") && cli_has("step 20/24"), "%s", cli_out);
        CHECKF(same_bytes(a_out, b_out), "setup %d: final models differ", k);
        CHECKF(same_bytes(ckpt(a_dir, 16), ckpt(b_dir, 16)), "setup %d: checkpoints of step 16 differ", k);
        CHECKF(same_bytes(ckpt(a_dir, 24), ckpt(b_dir, 24)), "setup %d: checkpoints of step 24 differ", k);
        CHECKF(strcmp(listing(b_dir), "ckpt_00000016.safetensors ckpt_00000024.safetensors") == 0, "%s",
               listing(b_dir));
        /* a checkpoint of a finished run resumes to nothing more */
        rc = cli("train %s --out '%s' --keep 2 --resume", common, b_out);
        CHECKF(rc == 0 && cli_has("at step 24") && !cli_has("step 24/24"), "%d: %s", rc, cli_out);
        CHECK(same_bytes(a_out, b_out));
    }
    /* the shard and the text file of the same ids draw the same batches */
    const char *c_out = test_path("C0.safetensors");
    int rc = cli("train %s --arch diff --lr 3e-3 --warmup 3 --copy-frac 0.3 --tokens '%s' --steps 24 --seed 5 --out '%s'", TINY, bin,
                 c_out);
    CHECK(rc == 0 && same_bytes(c_out, test_path("A0.safetensors")));
    /* what a checkpoint records */
    dtx_ckpt ck;
    REQUIRE(dtx_ckpt_load(&ck, ckpt(test_path("B0.safetensors.ckpt"), 24)) == DTX_OK);
    CHECK(ck.step == 24);
    const char *v = dtx_ckpt_meta(&ck, "data_path");
    CHECK(v && strcmp(v, txt) == 0);
    v = dtx_ckpt_meta(&ck, "data_tokens");
    CHECK(v && strcmp(v, "3000") == 0);
    v = dtx_ckpt_meta(&ck, "precision");
    CHECK(v && strcmp(v, "fp32") == 0);
    v = dtx_ckpt_meta(&ck, "warmup_steps");
    CHECK(v && strcmp(v, "3") == 0);
    CHECK(dtx_ckpt_meta(&ck, "loss") && dtx_ckpt_meta(&ck, "seed") && dtx_ckpt_meta(&ck, "batch"));
    dtx_ckpt_free(&ck);
    /* a checkpoint is not a model: the model loader refuses it, and info reads it as a checkpoint */
    dtx_model *cm = NULL;
    CHECK(dtx_model_load(&cm, ckpt(test_path("B0.safetensors.ckpt"), 24)) == DTX_ERR_FORMAT &&
          strstr(dtx_last_error(), "unexpected tensor 'optim."));
    CHECKF(cli("info '%s'", ckpt(test_path("B0.safetensors.ckpt"), 24)) == 0 &&
               cli_has("checkpoint      step 24 (the model below and its AdamW moments)") && cli_has("arch            diff"),
           "%s", cli_out);
    CHECK(cli("info --json '%s'", ckpt(test_path("B0.safetensors.ckpt"), 24)) == 0 && cli_has("\"checkpoint_step\":24"));
    /* a checkpoint cut short is refused by info with the checkpoint loader's line */
    const char *cut = test_path("cut.safetensors");
    size_t n = 0;
    char *bytes = test_slurp(ckpt(test_path("B0.safetensors.ckpt"), 24), &n);
    REQUIRE(bytes && n > 100);
    REQUIRE(write_file(cut, bytes, n - 100) == 0);
    free(bytes);
    CHECKF(cli("info '%s'", cut) == 1 && cli_one_line(), "%s", cli_out);
}

/* Rewrites the checkpoint at path without the metadata key `drop`, as a
 * checkpoint written before that key existed. */
static int drop_meta_key(const char *path, const char *drop) {
    dtx_st_file f;
    if (dtx_st_open(&f, path) != DTX_OK) return -1;
    dtx_st_out *ts = calloc((size_t)f.n_tensors, sizeof *ts);
    float **bufs = calloc((size_t)f.n_tensors, sizeof *bufs);
    const char **keys = calloc((size_t)f.n_meta, sizeof *keys), **vals = calloc((size_t)f.n_meta, sizeof *vals);
    int n = 0, rc = -1;
    if (!ts || !bufs || !keys || !vals) goto done;
    for (int i = 0; i < f.n_tensors; i++) {
        const dtx_st_tensor *t = &f.tensors[i];
        bufs[i] = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
        if (!bufs[i]) goto done;
        dtx_st_to_real(t, bufs[i]);
        ts[i].name = t->name, ts[i].ndim = t->ndim, ts[i].data = bufs[i];
        memcpy(ts[i].shape, t->shape, sizeof ts[i].shape);
    }
    for (int i = 0; i < f.n_meta; i++)
        if (strcmp(f.meta_keys[i], drop) != 0) keys[n] = f.meta_keys[i], vals[n] = f.meta_values[i], n++;
    rc = dtx_st_write(path, ts, f.n_tensors, keys, vals, n, 0) == DTX_OK ? 0 : -1;
done:
    for (int i = 0; bufs && i < f.n_tensors; i++) free(bufs[i]);
    free(ts), free(bufs), free(keys), free(vals);
    dtx_st_close(&f);
    return rc;
}

/* A checkpoint written before the variant keys (subln, lambda_init) existed
 * resumes as the default variant it is, and refuses a run that asks for
 * another. */
TEST(train_cli_resume_checkpoint_without_variant_keys) {
    const char *txt, *bin, *val;
    data_files(&txt, &bin, &val);
    REQUIRE(bin);
    const char *o = test_path("old.safetensors");
    char dir[600];
    snprintf(dir, sizeof dir, "%s.ckpt", o);
    int rc = cli("train %s --tokens '%s' --out '%s' --steps 6 --stop-after 3", TINY, bin, o);
    REQUIRE(rc == 0 && exists(ckpt(dir, 3)));
    REQUIRE(drop_meta_key(ckpt(dir, 3), "subln") == 0 && drop_meta_key(ckpt(dir, 3), "lambda_init") == 0);
    dtx_st_file f;
    REQUIRE(dtx_st_open(&f, ckpt(dir, 3)) == DTX_OK);
    CHECK(!dtx_st_meta(&f, "subln") && !dtx_st_meta(&f, "lambda_init") && dtx_st_meta(&f, "arch"));
    dtx_st_close(&f);
    rc = cli("train %s --tokens '%s' --out '%s' --steps 6 --resume --subln none", TINY, bin, o);
    CHECK_ONLY(rc, 2, "--subln differs", "subln = none in this run, rms in the checkpoint");
    rc = cli("train %s --tokens '%s' --out '%s' --steps 6 --resume", TINY, bin, o);
    CHECKF(rc == 0 && cli_has("resumed from") && cli_has("at step 3"), "%d: %s", rc, cli_out);
}

TEST(train_cli_resume_refuses_other_settings) {
    const char *txt, *bin, *val;
    data_files(&txt, &bin, &val);
    REQUIRE(txt);
    const char *o = test_path("R.safetensors");
    char dir[600];
    snprintf(dir, sizeof dir, "%s.ckpt", o);
    /* --resume with no checkpoint starts from step 0 */
    int rc = cli("train %s --tokens '%s' --out '%s' --steps 10 --stop-after 4 --resume", TINY, bin, o);
    CHECKF(rc == 0 && cli_has("no checkpoint in ") && cli_has("starting at step 0"), "%d: %s", rc, cli_out);
    REQUIRE(exists(ckpt(dir, 4)));
    struct {
        const char *flags, *s1, *s2;
    } cases[] = {
        /* fewer steps: a schedule can be extended (train_cli_resume_extends_the_schedule), not cut short */
        {"--steps 9", "--steps differs from the checkpoint", "total_steps = 9 in this run, 10 in the checkpoint"},
        {"--steps 10 --lr 2e-3", "--lr differs", "lr = 0.002 in this run, 0.001 in the checkpoint"},
        {"--steps 10 --batch 3", "--batch differs", "batch = 3 in this run, 4"},
        {"--steps 10 --seed 2", "--seed differs", "seed = 2"},
        {"--steps 10 --precision bf16", "--precision differs", "precision = bf16 in this run, fp32"},
        {"--steps 10 --dim 64", "--dim differs", "dim = 64"},
        {"--steps 10 --no-tie", "--tie/--no-tie differs", "tie_embeddings = false"},
        {"--steps 10 --clip 0", "--clip differs", "clip_norm = 0 in this run, 1 in"},
        {"--steps 10 --warmup 1", "--warmup differs", "warmup_steps = 1"},
        {"--steps 10 --subln none", "--subln differs", "subln = none in this run, rms in the checkpoint"},
        {"--steps 10 --lambda-init 0.8", "--lambda-init differs", "lambda_init = 0.8 in this run, schedule"},
        {"--steps 10 --init-scheme gpt2", "--init-scheme differs", "init_scheme = gpt2 in this run, torch"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rc = cli("train %s --tokens '%s' --out '%s' --resume %s", TINY, bin, o, cases[i].flags);
        CHECK_ONLY(rc, 2, cases[i].s1, cases[i].s2);
        CHECKF(cli_has("ckpt_00000004.safetensors") && cli_has("a resumed run must use the same settings"), "%s", cli_out);
    }
    /* other tokens: the same count, other ids */
    rc = cli("train %s --tokens '%s' --out '%s' --resume --steps 10 --stop-after 6", TINY, txt, o);
    CHECKF(rc == 0 && exists(ckpt(dir, 6)), "the text file holds the same ids as the shard: %d: %s", rc, cli_out);
    const char *other = test_path("other.bin");
    int32_t ids[3000];
    for (int i = 0; i < 3000; i++) ids[i] = i % 16;
    REQUIRE(dtx_shard_write(other, ids, 3000, 16) == DTX_OK);
    rc = cli("train %s --tokens '%s' --out '%s' --resume --steps 10", TINY, other, o);
    CHECK_ONLY(rc, 2, "--tokens differs from the checkpoint", "data_hash = ");
    /* a fresh run into a folder holding checkpoints would mix two runs */
    rc = cli("train %s --tokens '%s' --out '%s' --steps 10", TINY, bin, o);
    CHECK_ONLY(rc, 1, "already holds checkpoints (the newest of step 6)", "--resume");
    /* a damaged newest checkpoint is refused, not skipped */
    const char *c6 = ckpt(dir, 6);
    REQUIRE(truncate(c6, 100) == 0);
    rc = cli("train %s --tokens '%s' --out '%s' --resume --steps 10", TINY, bin, o);
    CHECK_ONLY(rc, 1, c6, "past the end of the file");
}

/* --resume with more --steps than the checkpoint's schedule extends the run
 * (docs/training.md "Extending a run"): a finished run and a running one
 * alike continue with a warm restart of the schedule at the step resumed
 * from; the extended run stopped and resumed again gives the same bytes as
 * one extended in one go, and the log shows the restart's rates. */
TEST(train_cli_resume_extends_the_schedule) {
    const char *txt, *bin, *val;
    data_files(&txt, &bin, &val);
    REQUIRE(bin);
    char common[2048], a[512], b[512], adir[600], log[600];
    snprintf(common, sizeof common, "%s --tokens '%s' --lr 4e-3 --min-lr 4e-4 --warmup 4 --ckpt-every 4 --seed 3",
             TINY, bin);
    snprintf(a, sizeof a, "%s", test_path("X.safetensors"));
    snprintf(b, sizeof b, "%s", test_path("Y.safetensors"));
    snprintf(adir, sizeof adir, "%s.ckpt", a);
    snprintf(log, sizeof log, "%s", test_path("X.jsonl"));
    /* A: 12 steps, finished; then extended to 60 in one go */
    REQUIRE(cli("train %s --steps 12 --out '%s' --log '%s'", common, a, log) == 0);
    int rc = cli("train %s --steps 60 --out '%s' --resume --log '%s'", common, a, log);
    CHECKF(rc == 0 && cli_has("extending the run from 12 to 60 steps: the schedule restarts at step 12") &&
               cli_has("step 60/60"), "%d: %s", rc, cli_out);
    /* B: the same, the extension stopped at step 24 and resumed */
    REQUIRE(cli("train %s --steps 12 --out '%s'", common, b) == 0);
    rc = cli("train %s --steps 60 --out '%s' --resume --stop-after 24", common, b);
    CHECKF(rc == 0 && cli_has("extending the run"), "%d: %s", rc, cli_out);
    rc = cli("train %s --steps 60 --out '%s' --resume", common, b);
    CHECKF(rc == 0 && !cli_has("extending the run") && cli_has("at step 24"), "%d: %s", rc, cli_out);
    CHECKF(same_bytes(a, b), "an extended run stopped and resumed differs from one extended at once");
    /* the rates of A's log: the decay to 4e-4 at step 12, then back up over min(4, 48/10) = 4 steps to 4e-3 */
    double lr[61] = {0};
    FILE *f = fopen(log, "rb");
    REQUIRE(f);
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        long long st;
        double v;
        const char *p = strstr(line, "\"lr\":");
        if (sscanf(line, "{\"step\":%lld", &st) == 1 && p && sscanf(p + 5, "%lf", &v) == 1 && st >= 1 && st <= 60)
            lr[st] = v;
    }
    fclose(f);
    CHECKF(fabs(lr[12] - 4e-4) < 1e-9, "lr at step 12: %g", lr[12]);
    CHECKF(fabs(lr[13] - (4e-4 + 3.6e-3 / 4)) < 1e-9 && fabs(lr[16] - 4e-3) < 1e-9, "%g %g", lr[13], lr[16]);
    CHECKF(fabs(lr[60] - 4e-4) < 1e-9 && lr[40] < lr[20], "%g %g %g", lr[20], lr[40], lr[60]);
    /* a running run extends too (from its rate at step 8), and a checkpoint records the restart */
    const char *c = test_path("Z.safetensors");
    REQUIRE(cli("train %s --steps 12 --out '%s' --stop-after 8", common, c) == 0);
    rc = cli("train %s --steps 30 --out '%s' --resume", common, c);
    CHECKF(rc == 0 && cli_has("from 12 to 30 steps: the schedule restarts at step 8"), "%d: %s", rc, cli_out);
    dtx_ckpt ck;
    REQUIRE(dtx_ckpt_load(&ck, ckpt(adir, 60)) == DTX_OK);
    const dtx_optim_config *oc = dtx_optimizer_config(ck.opt);
    CHECK(oc->restart_step == 12 && oc->total_steps == 60 && fabs(oc->restart_lr - 4e-4) < 1e-12);
    CHECK(strcmp(dtx_ckpt_meta(&ck, "restart_step"), "12") == 0);
    dtx_ckpt_free(&ck);
}

/* ------------------------------------------------------------ Ctrl-C */

/* Waits until the JSONL log holds at least one step (30 s at most). */
static int wait_for_steps(const char *log) {
    for (int i = 0; i < 3000; i++) {
        FILE *f = fopen(log, "rb");
        if (f) {
            char line[4096];
            int found = 0;
            while (fgets(line, sizeof line, f)) found |= strstr(line, "\"loss\"") != NULL;
            fclose(f);
            if (found) return 1;
        }
        struct timespec t = {0, 10 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    return 0;
}

/* SIGINT: the step finishes, a checkpoint is written, exit 130; resuming
 * from it gives what a run that never stopped gives. SIGTERM: the same, 143. */
TEST(train_cli_sigint_writes_checkpoint) {
    const char *txt, *bin, *val;
    data_files(&txt, &bin, &val);
    REQUIRE(txt);
    const char *o = test_path("I.safetensors"), *log = test_path("I.jsonl"), *sout = test_path("I.out");
    char dir[600], args[4096];
    snprintf(dir, sizeof dir, "%s.ckpt", o);
    snprintf(args, sizeof args, "train %s --tokens '%s' --out '%s' --steps 100000 --log '%s' --accum 2", TINY, bin, o,
             log);
    pid_t pid = spawn(args, sout, 0);
    REQUIRE(pid > 0);
    int started = wait_for_steps(log);
    kill(pid, SIGINT);
    int rc = wait_exit(pid);
    slurp(sout);
    REQUIRE(started);
    CHECKF(rc == 130, "exit %d: %s", rc, cli_out);
    char line[4096];
    long long n = -1;
    REQUIRE(line_with("difftx train: interrupted at step ", line, sizeof line));
    CHECK(sscanf(line, "difftx train: interrupted at step %lld;", &n) == 1 && n >= 1);
    CHECKF(strstr(line, ckpt(dir, n)) && strstr(line, "resume with --resume"), "%s", line);
    CHECK(!exists(o));
    CHECKF(strcmp(listing(dir), strrchr(ckpt(dir, n), '/') + 1) == 0, "%s", listing(dir));
    /* the log ends with whole lines: the steps, then the checkpoint */
    int lines = each_json(log, NULL, NULL);
    CHECKF(lines >= n + 1, "%d lines for %lld steps", lines, n);
    dtx_ckpt ck;
    REQUIRE(dtx_ckpt_load(&ck, ckpt(dir, n)) == DTX_OK);
    CHECK(ck.step == n);
    dtx_ckpt_free(&ck);

    /* resumed to n + 3 == never stopped until n + 3 */
    rc = cli("%s --resume --stop-after %lld", args, n + 3);
    CHECKF(rc == 0 && exists(ckpt(dir, n + 3)), "%d: %s", rc, cli_out);
    const char *ro = test_path("Iref.safetensors");
    char rdir[600];
    snprintf(rdir, sizeof rdir, "%s.ckpt", ro);
    rc = cli("train %s --tokens '%s' --out '%s' --steps 100000 --accum 2 --stop-after %lld", TINY, bin, ro, n + 3);
    CHECK(rc == 0);
    CHECK(same_bytes(ckpt(dir, n + 3), ckpt(rdir, n + 3)));

    /* SIGTERM, on a resumed run */
    char rargs[4200];
    snprintf(rargs, sizeof rargs, "%s --resume", args);
    int lines_before = each_json(log, NULL, NULL);
    pid = spawn(rargs, sout, 0);
    REQUIRE(pid > 0);
    for (int i = 0; i < 3000 && each_json(log, NULL, NULL) < lines_before + 2; i++) {
        struct timespec t = {0, 10 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    kill(pid, SIGTERM);
    rc = wait_exit(pid);
    slurp(sout);
    CHECKF(rc == 143 && cli_has("interrupted at step "), "exit %d: %s", rc, cli_out);
}

/* ------------------------------------------------------------ NaN */

TEST(train_cli_nan_stops_with_last_checkpoint) {
    const char *txt, *bin, *val;
    data_files(&txt, &bin, &val);
    REQUIRE(txt);
    const char *o = test_path("N.safetensors"), *log = test_path("N.jsonl");
    char dir[600];
    snprintf(dir, sizeof dir, "%s.ckpt", o);
    /* the test hook: step 7's loss reads as NaN */
    int rc = cli("train %s --tokens '%s' --out '%s' --steps 12 --ckpt-every 3 --debug-nan-at 7 --log '%s'", TINY, bin,
                 o, log);
    CHECK_MSG(rc, 1, "the loss is NaN at step 7: stopped without updating the weights",
              "the last good checkpoint is ");
    CHECKF(cli_has("ckpt_00000006.safetensors (step 6)\n"), "%s", cli_out);
    CHECK(!exists(o));
    CHECKF(strcmp(listing(dir), "ckpt_00000003.safetensors ckpt_00000006.safetensors") == 0, "%s", listing(dir));
    CHECK(each_json(log, NULL, NULL) > 0);
    /* the checkpoint is good: resuming without the hook finishes the run,
     * exactly as a run that never saw the NaN */
    rc = cli("train %s --tokens '%s' --out '%s' --steps 12 --ckpt-every 3 --resume", TINY, bin, o);
    CHECKF(rc == 0, "%d: %s", rc, cli_out);
    const char *ref = test_path("Nref.safetensors");
    rc = cli("train %s --tokens '%s' --out '%s' --steps 12", TINY, bin, ref);
    CHECK(rc == 0 && same_bytes(o, ref));
    /* a real divergence: an absurd learning rate */
    const char *d = test_path("D.safetensors");
    rc = cli("train %s --tokens '%s' --out '%s' --steps 50 --lr 1e6 --clip 0 --ckpt-every 1", TINY, bin, d);
    CHECK_MSG(rc, 1, "is NaN at step ", "stopped without updating the weights; the last good checkpoint is ");
    CHECK(!exists(d));
    /* without checkpoints */
    rc = cli("train %s --tokens '%s' --out '%s' --steps 12 --debug-nan-at 2", TINY, bin, test_path("D2.safetensors"));
    CHECK_MSG(rc, 1, "the loss is NaN at step 2", "no checkpoint was written (see --ckpt-every)");
}

/* ------------------------------------------------------------ write failures */

static int no_temp_files(const char *dir) { return strstr(listing(dir), ".tmp.") == NULL; }

TEST(train_cli_write_failures_are_errors) {
    const char *txt, *bin, *val;
    data_files(&txt, &bin, &val);
    REQUIRE(txt);
    const char *file = test_path("plain-file.txt");
    REQUIRE(write_file(file, "x", 1) == 0);
    const char *o = test_path("W.safetensors");
    /* unwritable places, found before training */
    int rc = cli("train %s --tokens '%s' --out '%s' --steps 5 --ckpt-dir '%s/sub'", TINY, bin, o, file);
    CHECK_ONLY(rc, 1, "--ckpt-dir", "is not a folder");
    rc = cli("train %s --tokens '%s' --out '%s' --steps 5 --log '%s/x.jsonl'", TINY, bin, o, file);
    CHECK_ONLY(rc, 1, "--log", "Not a directory");
    rc = cli("train %s --tokens '%s' --out '%s/m.safetensors' --steps 5", TINY, bin, file);
    CHECK_ONLY(rc, 1, "--out", "cannot write");
    CHECK(!exists(o));

    /* a full disk (a file size limit): the model is about 85 KB, a checkpoint
     * three times that */
    char dir[600], args[4096];
    snprintf(dir, sizeof dir, "%s/full", test_tmpdir());
    snprintf(args, sizeof args, "train %s --tokens '%s' --out '%s' --steps 5 --ckpt-every 2 --ckpt-dir '%s'", TINY, bin,
             o, dir);
    rc = run_limited(args, 150 * 1000);
    CHECK_MSG(rc, 1, "writing the checkpoint of step 2: ", "File too large");
    CHECK(!exists(o) && no_temp_files(dir) && !exists(ckpt(dir, 2)));
    /* the model itself */
    snprintf(args, sizeof args, "train %s --tokens '%s' --out '%s' --steps 3", TINY, bin, o);
    rc = run_limited(args, 40 * 1000);
    CHECK_MSG(rc, 1, "saving the model: ", "File too large");
    CHECK(!exists(o) && no_temp_files(test_tmpdir()));
    /* the log: it fails at its first lines */
    snprintf(args, sizeof args, "train %s --tokens '%s' --out '%s' --steps 300 --log '%s/big.jsonl'", TINY, bin, o,
             test_tmpdir());
    rc = run_limited(args, 2000);
    CHECK_MSG(rc, 1, "--log ", "cannot write: File too large");
    CHECK(!exists(o));
}

/* ------------------------------------------------------------ log and validation */

typedef struct {
    int steps, evals, ckpts, bad;
    double last_val;
    long long val_steps[8];
} log_summary;

static void summarise(const cJSON *j, void *ctx) {
    log_summary *s = ctx;
    const cJSON *step = cJSON_GetObjectItem(j, "step");
    if (!cJSON_IsNumber(step)) {
        s->bad++;
        return;
    }
    if (cJSON_GetObjectItem(j, "loss")) {
        static const char *const keys[] = {"loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s"};
        for (int i = 0; i < 5; i++) s->bad += !cJSON_IsNumber(cJSON_GetObjectItem(j, keys[i]));
        s->bad += step->valuedouble != s->steps + 1;
        s->steps++;
    } else if (cJSON_GetObjectItem(j, "val_loss")) {
        s->last_val = cJSON_GetObjectItem(j, "val_loss")->valuedouble;
        if (s->evals < 8) s->val_steps[s->evals] = (long long)step->valuedouble;
        s->evals++;
    } else if (cJSON_GetObjectItem(j, "checkpoint")) s->ckpts++;
    else s->bad++;
}

/* Copy rows (--copy-frac) put the induction score's parts in the step
 * lines: copy_first (the loss on each row's first L positions) and
 * copy_repeat (on the rest); a run without copy rows has neither. On a
 * pure copy stream a small model learns induction within a few hundred
 * steps, so repeat falls far below first. */
typedef struct {
    int with, without;
    double first, repeat; /* of the last step */
} copy_summary;

static void copy_lines(const cJSON *j, void *ctx) {
    copy_summary *c = ctx;
    if (!cJSON_GetObjectItem(j, "loss")) return;
    const cJSON *f = cJSON_GetObjectItem(j, "copy_first"), *r = cJSON_GetObjectItem(j, "copy_repeat");
    const cJSON *n = cJSON_GetObjectItem(j, "copy_rows");
    if (cJSON_IsNumber(f) && cJSON_IsNumber(r) && cJSON_IsNumber(n) && n->valuedouble >= 1) {
        c->with++, c->first = f->valuedouble, c->repeat = r->valuedouble;
    } else if (!f && !r && !n) c->without++;
}

TEST(train_cli_log_copy_score) {
    const char *txt, *bin, *val;
    data_files(&txt, &bin, &val);
    REQUIRE(bin);
    const char *o = test_path("C.safetensors"), *log = test_path("C.jsonl");
    int rc = cli("train --dim 32 --layers 2 --heads 2 --vocab 16 --ffn 64 --seq 64 --batch 8 --tokens '%s' "
                 "--out '%s' --steps 300 --lr 3e-3 --copy-frac 1 --log '%s' --log-every 100",
                 bin, o, log);
    REQUIRE(rc == 0);
    copy_summary c = {0};
    each_json(log, copy_lines, &c);
    CHECKF(c.with == 300 && c.without == 0, "%d steps with the score, %d without", c.with, c.without);
    CHECKF(c.first > 2.0 && c.repeat < 0.5 * c.first, "last step: first %.3f, repeat %.3f", c.first, c.repeat);
    rc = cli("train %s --tokens '%s' --out '%s' --steps 3 --log '%s'", TINY, bin, o, log);
    REQUIRE(rc == 0);
    memset(&c, 0, sizeof c);
    each_json(log, copy_lines, &c);
    CHECKF(c.with == 0 && c.without == 3, "%d steps with the score, %d without", c.with, c.without);
}

/* --log-steps N: a step line every N steps and at the last; a DIFF run's
 * lines carry λ per layer (the last one the saved model's), a Transformer's
 * none. */
typedef struct {
    int steps[16], n, with_lambda, lambda_len;
    double last_lambda[2];
} lambda_log;

static void lambda_lines(const cJSON *j, void *ctx) {
    lambda_log *s = ctx;
    const cJSON *step = cJSON_GetObjectItem(j, "step"), *lam = cJSON_GetObjectItem(j, "lambda");
    if (!cJSON_IsNumber(step) || !cJSON_GetObjectItem(j, "loss")) return;
    if (s->n < 16) s->steps[s->n] = step->valueint;
    s->n++;
    if (!cJSON_IsArray(lam)) return;
    s->with_lambda++;
    s->lambda_len = cJSON_GetArraySize(lam);
    for (int l = 0; l < 2 && l < s->lambda_len; l++) s->last_lambda[l] = cJSON_GetArrayItem(lam, l)->valuedouble;
}

TEST(train_cli_log_steps_and_lambda) {
    const char *txt, *bin, *val;
    data_files(&txt, &bin, &val);
    REQUIRE(bin);
    const char *o = test_path("LS.safetensors"), *log = test_path("LS.jsonl");
    int rc = cli("train %s --arch diff --tokens '%s' --out '%s' --steps 12 --lr 3e-2 --log-steps 5 --log '%s'", TINY,
                 bin, o, log);
    REQUIRE(rc == 0);
    lambda_log s = {0};
    each_json(log, lambda_lines, &s);
    CHECKF(s.n == 3 && s.steps[0] == 5 && s.steps[1] == 10 && s.steps[2] == 12, "%d step lines (%d %d %d)", s.n,
           s.steps[0], s.steps[1], s.steps[2]);
    CHECKF(s.with_lambda == 3 && s.lambda_len == 2, "%d lines with lambda, of %d values", s.with_lambda, s.lambda_len);
    dtx_model *m;
    REQUIRE(dtx_model_load(&m, o) == DTX_OK);
    for (int l = 0; l < 2; l++)
        CHECKF(fabs(s.last_lambda[l] - dtx_model_lambda(m, l)) <= 1e-5 * fmax(1, fabs(s.last_lambda[l])),
               "layer %d: logged %.9g, the model's %.9g", l, s.last_lambda[l], dtx_model_lambda(m, l));
    /* it moved from lambda_init (0.2, 0.355...) at this learning rate: the log follows training, not the init */
    CHECKF(fabs(s.last_lambda[0] - 0.2) > 1e-4, "%.9g", s.last_lambda[0]);
    dtx_model_free(m);
    rc = cli("train %s --arch transformer --heads 2 --tokens '%s' --out '%s' --steps 3 --log '%s'", TINY, bin, o, log);
    REQUIRE(rc == 0);
    memset(&s, 0, sizeof s);
    each_json(log, lambda_lines, &s);
    CHECKF(s.n == 3 && s.with_lambda == 0, "%d step lines, %d with lambda", s.n, s.with_lambda);
    rc = cli("train %s --tokens '%s' --out '%s' --steps 3 --log-steps 0", TINY, bin, o);
    CHECK_ONLY(rc, 2, "--log-steps", "0");
}

TEST(train_cli_log_and_validation) {
    const char *txt, *bin, *val;
    data_files(&txt, &bin, &val);
    REQUIRE(txt);
    const char *o = test_path("L.safetensors"), *log = test_path("L.jsonl"), *plain = test_path("L-plain.safetensors");
    int rc = cli("train %s --tokens '%s' --out '%s' --steps 10 --val-tokens '%s' --eval-every 4 --eval-batches 3 "
                 "--log '%s' --ckpt-every 5 --log-every 5",
                 TINY, bin, o, val, log);
    REQUIRE(rc == 0);
    CHECKF(cli_has("eval step 4  val_loss ") && cli_has("eval step 8  val_loss ") && cli_has("eval step 10  val_loss "), "%s", cli_out);
    CHECKF(cli_has("step 5/10  loss ") && cli_has(" tok/s  eta ") && !cli_has("step 4/10"), "%s", cli_out);
    log_summary s = {0};
    CHECK(each_json(log, summarise, &s) == 10 + 3 + 2);
    CHECKF(s.steps == 10 && s.evals == 3 && s.ckpts == 2 && s.bad == 0, "%d %d %d %d", s.steps, s.evals, s.ckpts,
           s.bad);
    CHECK(s.val_steps[0] == 4 && s.val_steps[1] == 8 && s.val_steps[2] == 10);
    /* the last validation is of the final model: 3 batches of 4 x 16 read in
     * order from the start of the validation shard */
    dtx_model *m;
    dtx_shard *vs;
    REQUIRE(dtx_model_load(&m, o) == DTX_OK);
    REQUIRE(dtx_shard_open(&vs, val, 16) == DTX_OK);
    int32_t in[64], tg[64];
    int64_t pos = 0;
    double sum = 0;
    for (int k = 0; k < 3; k++) {
        double l;
        REQUIRE(dtx_shard_sequential_batch(vs, &pos, 1, 4, 16, in, tg, NULL) == DTX_OK);
        REQUIRE(dtx_model_forward(m, in, tg, 4, 16, NULL, &l) == DTX_OK);
        sum += l;
    }
    CHECKF(fabs(sum / 3 - s.last_val) <= 1e-6 * fabs(s.last_val), "val_loss %.9g, recomputed %.9g", s.last_val,
           sum / 3);
    dtx_shard_close(vs);
    dtx_model_free(m);
    /* validation does not disturb training */
    rc = cli("train %s --tokens '%s' --out '%s' --steps 10", TINY, bin, plain);
    CHECK(rc == 0 && same_bytes(o, plain));
}

/* ------------------------------------------------------------ terminal */

/* With stderr on a terminal, a progress bar is redrawn in place (\r) and
 * kept within the terminal's width; stdout, a file here, still gets lines. */
TEST(train_cli_progress_bar_on_a_terminal) {
    const char *txt, *bin, *val;
    data_files(&txt, &bin, &val);
    REQUIRE(txt);
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    REQUIRE(master >= 0);
    REQUIRE(grantpt(master) == 0 && unlockpt(master) == 0);
    const char *slave = ptsname(master);
    REQUIRE(slave);
    const char *o = test_path("P.safetensors"), *sout = test_path("P.out");
    const char *bin_path = getenv("DIFFTX_BIN");
    if (!bin_path) bin_path = "build/difftx";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "exec %s train %s --tokens '%s' --out '%s' --steps 40 --log-every 20 >'%s'", bin_path,
             TINY, bin, o, sout);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int s = open(slave, O_RDWR);
        if (s < 0) _exit(126);
        dup2(s, 2);
        close(s);
        close(master);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    REQUIRE(pid > 0);
    /* read until the child is gone (then read fails with EIO) */
    static char tty[1 << 16];
    size_t n = 0;
    for (;;) {
        ssize_t r = read(master, tty + n, sizeof tty - 1 - n);
        if (r <= 0) break;
        n += (size_t)r;
        if (n == sizeof tty - 1) n = 0;
    }
    tty[n] = '\0';
    close(master);
    int rc = wait_exit(pid);
    CHECK(rc == 0);
    CHECKF(strstr(tty, "\rstep 40/40 [") && strstr(tty, "] 100%  loss ") && strstr(tty, " tok/s  eta "), "%s", tty);
    /* every redraw fits in 80 columns (the pty reports none: the default) */
    for (char *p = strchr(tty, '\r'); p; p = strchr(p + 1, '\r')) {
        size_t len = strcspn(p + 1, "\r\n\033");
        CHECKF(len < 80, "a %zu-character line", len);
    }
    slurp(sout);
    CHECKF(cli_has("step 20/40  loss ") && cli_has("step 40/40  loss ") && cli_has("saved "), "%s", cli_out);
    CHECK(!strchr(cli_out, '\r'));
}

/* ------------------------------------------------------------ flags */

TEST(train_cli_new_flags) {
    CHECK_ONLY(cli("train --tokens t --out o --eval-every 5"), 2, "--eval-every", "--val-tokens");
    CHECK_ONLY(cli("train --tokens t --out o --eval-batches 5"), 2, "--eval-batches", "--val-tokens");
    CHECK_ONLY(cli("train --tokens t --out o --keep -1"), 2, "--keep", "'-1'");
    CHECK_ONLY(cli("train --tokens t --out o --ckpt-every x"), 2, "--ckpt-every", "'x'");
    CHECK_ONLY(cli("train --tokens t --out o --stop-after 0"), 2, "--stop-after", "'0'");
    CHECK_ONLY(cli("train --tokens t --out o --resume=yes"), 2, "--resume", "takes no value");
    CHECK(cli("train --help") == 0);
    CHECKF(cli_has("--ckpt-dir DIR") && cli_has("--ckpt-every N") && cli_has("--keep K") && cli_has("--resume") &&
               cli_has("--stop-after N") && cli_has("--val-tokens FILE") && cli_has("--eval-every N") &&
               cli_has("--eval-batches N") && cli_has("--log FILE.jsonl") && cli_has("Ctrl-C"),
           "%s", cli_out);
    const char *txt, *bin, *val;
    data_files(&txt, &bin, &val);
    REQUIRE(txt);
    const char *shortv = test_path("short.txt");
    REQUIRE(write_file(shortv, "1 2 3", 5) == 0);
    CHECK_ONLY(cli("train %s --tokens '%s' --out '%s' --val-tokens '%s'", TINY, bin, test_path("V.safetensors"),
                   shortv),
               1, "(the validation tokens) holds 3 tokens", "short.txt");
    /* the synthetic rows' shares and files, refused by the trainer before any step, nothing written */
    const char *mo = test_path("M.safetensors");
    CHECK_ONLY(cli("train %s --tokens '%s' --out '%s' --needle-frac 0.5", TINY, bin, mo), 2, "needle_frac needs a "
               "tokenizer and a haystack text", "--needle-tokenizer, --needle-text");
    CHECK_ONLY(cli("train %s --tokens '%s' --out '%s' --icl-frac 0.5", TINY, bin, mo), 2, "icl_frac needs a tokenizer",
               "--needle-tokenizer)");
    CHECK_ONLY(cli("train %s --tokens '%s' --out '%s' --copy-frac 0.7 --icl-frac 0.5", TINY, bin, mo), 2,
               "shares add up to 1.2", "more than 1");
    CHECK(!exists(mo) && !exists(test_path("M.safetensors.ckpt")));
}

/* The evaluation commands take a checkpoint where they take a model (to
 * follow a run while it trains): the same numbers as the model file of the
 * same step; anything that is neither keeps the model reader's message. */
TEST(train_cli_checkpoint_as_model) {
    const char *txt, *bin, *val;
    data_files(&txt, &bin, &val);
    REQUIRE(txt);
    const char *out = test_path("K.safetensors"), *seq = test_path("K.txt");
    REQUIRE(write_file(seq, "1 2 3 4 5 6 7 8 1 2 3\n", 22) == 0);
    REQUIRE(cli("train %s --arch diff --tokens '%s' --steps 6 --ckpt-every 6 --out '%s'", TINY, bin, out) == 0);
    static char want[1 << 17];
    char dir[600];
    snprintf(dir, sizeof dir, "%s.ckpt", out);
    REQUIRE(cli("score --model '%s' --tokens '%s'", out, seq) == 0);
    memcpy(want, cli_out, sizeof want);
    CHECK(cli("score --model '%s' --tokens '%s'", ckpt(dir, 6), seq) == 0);
    CHECKF(strcmp(cli_out, want) == 0, "checkpoint: %s model: %s", cli_out, want);
    CHECK(cli("eval ppl --model '%s' --tokens '%s'", ckpt(dir, 6), val) == 0);
    CHECK(cli("score --model '%s' --tokens '%s'", val, seq) == 1 && cli_has("past the end") && cli_one_line());
}
