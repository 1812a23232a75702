/* difftx quantize, run as a separate process: each scheme writes a model
 * that info, score, eval ppl, sample and generate read, whose loss stays
 * near the fp32 model's; a folder and a text with --tokenizer calibrate as
 * their tokens do; fewer than 300 samples warn in one line and work; bad
 * flags and inputs give one line and exit 2 (usage) or 1 (runtime); a
 * quantised model cannot be trained or quantised again. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "difftx.h"
#include "test.h"

enum { SEQ = 32, VOCAB = 40 };

#define CHECK_ERR(rc_want, call, s)                                                                \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        CHECKF(rc_ == (rc_want), "exit %d, want %d: %s", rc_, (rc_want), cli_out);                 \
        CHECKF(cli_one_line_from("difftx quantize: "), "not one line: %s", cli_out);               \
        CHECKF(cli_has(s), "want '%s' in: %s", s, cli_out);                                        \
    } while (0)

static const char *model_file(void) {
    dtx_config c = test_config(DTX_ARCH_DIFF, 64, 2, 2, 2, VOCAB, 96, SEQ, 1);
    return test_model_file("fp.safetensors", &c, 3);
}

/* n ids below VOCAB as a text file at test_path(name). */
static const char *ids_file(const char *name, int n, uint64_t seed) {
    static char buf[1 << 16];
    size_t k = 0;
    uint64_t x = seed;
    for (int i = 0; i < n && k + 16 < sizeof buf; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%d ", (int)((x >> 33) % VOCAB));
    }
    const char *p = test_path(name);
    FILE *f = fopen(p, "wb");
    if (!f) return NULL;
    fwrite(buf, 1, k, f);
    fclose(f);
    return p;
}

static double score_of(const char *model, const char *tokens) {
    double loss = NAN;
    long long n;
    if (cli_split("score --model '%s' --tokens '%s'", model, tokens) != 0) return NAN;
    return sscanf(cli_out, "{\"loss\": %lf, \"tokens\": %lld}", &loss, &n) == 2 ? loss : NAN;
}

/* difftx quantize of fp into q, calibrated on 300 windows of calib, with flags ("--scheme w8a8 ..."): 1 when
 * it succeeded (cli_out holds what it said), else 0 with the failure recorded. */
static int quantize_300(const char *fp, const char *calib, const char *q, const char *flags) {
    int ok = cli_split("quantize --model '%s' --calib '%s' %s --out '%s' --calib-samples 300", fp, calib, flags, q) == 0;
    CHECKF(ok, "quantize %s: %s %s", flags, cli_out, cli_err);
    return ok;
}

/* q scores held within tol (relative) of the fp32 model's loss base. */
static void check_loss_near(const char *q, const char *held, double base, double tol, const char *what) {
    double l = score_of(q, held);
    CHECKF(fabs(l - base) < tol * base, "%s: loss %.5f, fp32 %.5f", what, l, base);
}

TEST(quantize_cli_every_scheme_is_read_by_every_command) {
    char fp[512], calib[512], held[512];
    snprintf(fp, sizeof fp, "%s", model_file());
    snprintf(calib, sizeof calib, "%s", ids_file("calib.txt", 2000, 1));
    snprintf(held, sizeof held, "%s", ids_file("held.txt", SEQ, 2));
    double base = score_of(fp, held);
    REQUIRE(isfinite(base));
    static const char *schemes[] = {"w8a16", "w8a8", "w4a16"};
    static const double tol[] = {0.01, 0.03, 0.08};
    for (int i = 0; i < 3; i++) {
        char q[512], flags[64];
        snprintf(q, sizeof q, "%s/q-%s.safetensors", test_tmpdir(), schemes[i]);
        snprintf(flags, sizeof flags, "--scheme %s", schemes[i]);
        REQUIRE(quantize_300(fp, calib, q, flags));
        CHECKF(cli_err[0] == '\0', "300 samples: no warning expected: %s", cli_err);
        CHECK(cli_has("wrote") && cli_has(schemes[i]) && cli_has("300 samples x 32 tokens"));
        REQUIRE(cli_split("info '%s'", q) == 0);
        CHECKF(cli_has("quantised       ") && cli_has(schemes[i]) && cli_has("calibration     "), "%s", cli_out);
        check_loss_near(q, held, base, tol[i], schemes[i]);
        CHECKF(cli("eval ppl --model '%s' --tokens '%s'", q, held) == 0, "%s", cli_out);
        CHECKF(cli("sample --model '%s' --prompt '1 2 3' --max-tokens 5", q) == 0, "%s", cli_out);
        CHECK_ERR(1, cli("quantize --model '%s' --calib '%s' --scheme %s --out '%s'", q, calib, schemes[i], fp),
                  "already quantised");
        CHECKF(cli("train --init '%s' --tokens '%s' --out '%s/t.safetensors' --steps 1", q, calib, test_tmpdir()) == 1 &&
                   cli_has("quantised models are for inference"), "%s", cli_out);
    }
}

/* --act16 fp16: written into the file, shown by info (text and JSON), and the
 * model scores close to fp32 like the bf16 one. */
TEST(quantize_cli_fp16_activations) {
    char fp[512], calib[512], held[512], q[512];
    snprintf(fp, sizeof fp, "%s", model_file());
    snprintf(calib, sizeof calib, "%s", ids_file("calib16.txt", 2000, 3));
    snprintf(held, sizeof held, "%s", ids_file("held16.txt", SEQ, 4));
    snprintf(q, sizeof q, "%s/q-fp16.safetensors", test_tmpdir());
    double base = score_of(fp, held);
    REQUIRE(quantize_300(fp, calib, q, "--scheme w4a16 --act16 fp16"));
    CHECK(cli_has("activations fp16"));
    REQUIRE(cli_split("info '%s'", q) == 0);
    CHECKF(cli_has("w4a16 (fp16 activations)"), "%s", cli_out);
    REQUIRE(cli_split("info --json '%s'", q) == 0);
    CHECKF(cli_has("\"quant_act16\":\"fp16\""), "%s", cli_out);
    check_loss_near(q, held, base, 0.08, "w4a16 fp16");
    /* w8a8 with two kinds of input kept bf16: said in the calibration record */
    REQUIRE(quantize_300(fp, calib, q, "--scheme w8a8 --a16-inputs qk,output"));
    CHECKF(cli_has("int8 absmax (bf16: qk,output)"), "%s", cli_out);
    check_loss_near(q, held, base, 0.03, "w8a8 a16 qk,output");
}

TEST(quantize_cli_folder_and_text_calibrate_like_their_tokens) {
    char fp[512], dir[512], one[512], q1[512], q2[512];
    snprintf(fp, sizeof fp, "%s", model_file());
    snprintf(dir, sizeof dir, "%s/calib", test_tmpdir());
    mkdir(dir, 0777);
    /* the folder: two files whose concatenation is the single file */
    snprintf(one, sizeof one, "%s", ids_file("all.txt", 600, 9));
    FILE *f = fopen(one, "rb");
    REQUIRE(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    size_t cut = n / 2;
    while (cut < n && buf[cut] != ' ') cut++;
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/a.txt", dir);
    snprintf(b, sizeof b, "%s/b.txt", dir);
    FILE *fa = fopen(a, "wb"), *fb = fopen(b, "wb");
    REQUIRE(fa && fb);
    fwrite(buf, 1, cut + 1, fa), fwrite(buf + cut + 1, 1, n - cut - 1, fb);
    fclose(fa), fclose(fb);
    snprintf(q1, sizeof q1, "%s/q1.safetensors", test_tmpdir());
    snprintf(q2, sizeof q2, "%s/q2.safetensors", test_tmpdir());
    REQUIRE(cli_split("quantize --model '%s' --calib '%s' --scheme w8a8 --out '%s'", fp, one, q1) == 0);
    REQUIREF(cli_split("quantize --model '%s' --calib '%s' --scheme w8a8 --out '%s'", fp, dir, q2) == 0, "%s", cli_out);
    CHECK(cli_has("(2 files, 600 tokens)"));
    /* the same tokens give the same weights (the metadata names the input, so compare the scores) */
    char held[512];
    snprintf(held, sizeof held, "%s", ids_file("held2.txt", SEQ, 4));
    CHECK(score_of(q1, held) == score_of(q2, held));
}

TEST(quantize_cli_warns_below_300_samples) {
    char fp[512], calib[512], q[512];
    snprintf(fp, sizeof fp, "%s", model_file());
    snprintf(calib, sizeof calib, "%s", ids_file("calib3.txt", 400, 5));
    snprintf(q, sizeof q, "%s/qw.safetensors", test_tmpdir());
    REQUIRE(cli_split("quantize --model '%s' --calib '%s' --scheme w8a16 --out '%s' --calib-samples 16", fp, calib,
                      q) == 0);
    CHECKF(strstr(cli_err, "warning: 16 calibration samples; at least 300 are recommended") &&
               strchr(cli_err, '\n') == cli_err + strlen(cli_err) - 1, "stderr: %s", cli_err);
}

TEST(quantize_cli_refusals) {
    char fp[512], calib[512], tiny[512], q[512];
    snprintf(fp, sizeof fp, "%s", model_file());
    snprintf(calib, sizeof calib, "%s", ids_file("calib4.txt", 400, 6));
    snprintf(tiny, sizeof tiny, "%s", ids_file("tiny.txt", 10, 7));
    snprintf(q, sizeof q, "%s/qr.safetensors", test_tmpdir());
    CHECK_ERR(2, cli("quantize --model '%s' --scheme w8a8 --out '%s'", fp, q), "--calib is required");
    CHECK_ERR(2, cli("quantize --model '%s' --calib '%s' --out '%s'", fp, calib, q), "--scheme is required");
    CHECK_ERR(2, cli("quantize --model '%s' --calib '%s' --scheme w4a8 --out '%s'", fp, calib, q), "--scheme");
    CHECK_ERR(2, cli("quantize --model '%s' --calib '%s' --scheme w8a16 --out '%s' --act-method mse", fp, calib, q),
              "set w8a8's activation ranges");
    CHECK_ERR(2, cli("quantize --model '%s' --calib '%s' --scheme w8a8 --out '%s' --a16-inputs qk,ffn", fp, calib, q),
              "'ffn' is not attn_in");
    CHECK_ERR(2, cli("quantize --model '%s' --calib '%s' --scheme w8a16 --out '%s' --a16-inputs qk", fp, calib, q),
              "--scheme is not w8a8");
    CHECK_ERR(2, cli("quantize --model '%s' --calib '%s' --scheme w8a8 --out '%s' --act16 fp16", fp, calib, q),
              "w8a8's are int8");
    CHECK_ERR(2, cli("quantize --model '%s' --calib '%s' --scheme w8a16 --out '%s' --act16 fp8", fp, calib, q),
              "--act16");
    CHECK_ERR(2, cli("quantize --model '%s' --calib '%s' --scheme w8a8 --out '%s' --percentile 99", fp, calib, q),
              "--percentile goes with --act-method percentile");
    CHECK_ERR(2, cli("quantize --model '%s' --calib '%s' --scheme w8a8 --out '%s' --calib-len 33", fp, calib, q),
              "exceeds the model's max_seq_len 32");
    CHECK_ERR(2, cli("quantize --model '%s' --calib '%s' --scheme w8a8 --out '%s' --calib-samples 0", fp, calib, q),
              "--calib-samples");
    CHECK_ERR(1, cli("quantize --model '%s' --calib '%s' --scheme w8a8 --out '%s'", fp, tiny, q),
              "fewer than one sequence");
    CHECK_ERR(1, cli("quantize --model '%s' --calib '%s/none' --scheme w8a8 --out '%s'", fp, test_tmpdir(), q),
              "No such file");
    char empty[512];
    snprintf(empty, sizeof empty, "%s/emptydir", test_tmpdir());
    mkdir(empty, 0777);
    CHECK_ERR(1, cli("quantize --model '%s' --calib '%s' --scheme w8a8 --out '%s'", fp, empty, q), "holds no files");
    char bad[512];
    snprintf(bad, sizeof bad, "%s", test_path("bad_ids.txt"));
    FILE *f = fopen(bad, "wb");
    REQUIRE(f);
    fputs("1 2 3 99 4\n", f); /* 99 >= VOCAB */
    fclose(f);
    CHECK_ERR(1, cli("quantize --model '%s' --calib '%s' --scheme w8a8 --out '%s'", fp, bad, q), "99");
    struct stat sb;
    CHECK(stat(q, &sb) != 0); /* nothing written */
}

TEST(quantize_cli_text_with_tokenizer_calibrates_like_its_ids) {
    const char *text = "The union is strong, and the state of the union is the state of its people. "
                       "We will keep our promises to the people who sent us here, year after year.";
    const char *tkp = NULL;
    dtx_tokenizer *tok = test_tokenizer_file(&text, 1, 280, "q.tok", &tkp);
    REQUIRE(tok && tkp);
    char tk[512], txt[512], ids[512], fp[512], q1[512], q2[512];
    snprintf(tk, sizeof tk, "%s", tkp);
    snprintf(txt, sizeof txt, "%s", test_path("calib_text.txt"));
    snprintf(ids, sizeof ids, "%s", test_path("calib_text_ids.txt"));
    FILE *f = fopen(txt, "wb");
    REQUIRE(f);
    for (int r = 0; r < 8; r++) fputs(text, f);
    fclose(f);
    /* its ids, encoded here */
    static char all[1 << 14];
    size_t len = 0;
    for (int r = 0; r < 8; r++) len += (size_t)snprintf(all + len, sizeof all - len, "%s", text);
    int32_t *id = NULL;
    int64_t n = 0;
    REQUIRE(dtx_tokenizer_encode(tok, all, len, DTX_ENCODE_ORDINARY, &id, &n) == DTX_OK && n > SEQ);
    f = fopen(ids, "wb");
    REQUIRE(f);
    for (int64_t i = 0; i < n; i++) fprintf(f, "%d ", id[i]);
    fclose(f);
    free(id);
    dtx_tokenizer_free(tok);
    dtx_config c = test_config(DTX_ARCH_TRANSFORMER, 32, 1, 2, 2, 280, 64, SEQ, 1);
    snprintf(fp, sizeof fp, "%s", test_model_file("fp280.safetensors", &c, 4));
    snprintf(q1, sizeof q1, "%s/qt1.safetensors", test_tmpdir());
    snprintf(q2, sizeof q2, "%s/qt2.safetensors", test_tmpdir());
    REQUIREF(cli_split("quantize --model '%s' --calib '%s' --tokenizer '%s' --scheme w8a8 --out '%s' --calib-samples 20",
                       fp, txt, tk, q1) == 0, "%s", cli_out);
    REQUIRE(cli_split("quantize --model '%s' --calib '%s' --scheme w8a8 --out '%s' --calib-samples 20", fp, ids, q2) == 0);
    /* a window of ids scored under both */
    char win[512];
    snprintf(win, sizeof win, "%s", test_path("win.txt"));
    f = fopen(win, "wb");
    REQUIRE(f);
    for (int i = 0; i < SEQ; i++) fprintf(f, "%d ", (i * 7) % 280);
    fclose(f);
    double a = score_of(q1, win), b = score_of(q2, win);
    CHECKF(isfinite(a) && a == b, "text %.9g, ids %.9g", a, b);
}
