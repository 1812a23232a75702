/* scripts/demo.sh (make demo) end to end, in seconds: a small corpus written
 * here instead of the State of the Union (no network), a tiny model, no
 * setup, build or plot (no root, no Python). Checks the side-by-side table,
 * one sample per model and prompt, the reuse of everything on a rerun, and
 * the usage errors. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test.h"

/* Runs scripts/demo.sh with the binary under test and args; captures
 * stdout + stderr into cli_out and returns the exit status. */
__attribute__((format(printf, 1, 2))) static int demo(const char *fmt, ...) {
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    const char *bin = getenv("DIFFTX_BIN");
    snprintf(cmd, sizeof cmd, "scripts/demo.sh --no-setup --no-build --no-plot %s '%s' 2>&1 </dev/null", args,
             bin ? bin : "build/difftx");
    return run_cmd(cmd, cli_out, sizeof cli_out);
}

/* corpus/{train,val}/: a few "speeches" of varied sentences. */
static const char *make_corpus(void) {
    static const char *words[] = {"the", "people", "of", "our", "nation", "have", "shown", "that",
                                  "congress", "will", "act", "and", "we", "must", "build", "a",
                                  "stronger", "union", "for", "all", "citizens", "today"};
    const int nw = (int)(sizeof words / sizeof words[0]);
    const char *dir = test_path("corpus");
    char path[600];
    snprintf(path, sizeof path, "%s", dir);
    if (mkdir(path, 0755) != 0) return NULL;
    unsigned s = 12345;
    for (int split = 0; split < 2; split++) {
        snprintf(path, sizeof path, "%s/%s", dir, split ? "val" : "train");
        if (mkdir(path, 0755) != 0) return NULL;
        for (int doc = 0; doc < (split ? 2 : 6); doc++) {
            snprintf(path, sizeof path, "%s/%s/%02d.txt", dir, split ? "val" : "train", doc);
            FILE *f = fopen(path, "w");
            if (!f) return NULL;
            fprintf(f, "My fellow Americans, ");
            for (int i = 0; i < 1500; i++) {
                s = s * 1103515245u + 12345u;
                fprintf(f, "%s%s", words[(s >> 16) % nw], (s >> 8) % 11 == 0 ? ". " : " ");
            }
            fprintf(f, "\n");
            fclose(f);
        }
    }
    return dir;
}

/* One thread: a tiny model gains nothing from two, and on a busy machine the
 * OpenMP barriers of two would make it slow. */
#define TINY                                                                   \
    "--threads 1 --dim 16 --layers 1 --heads 2 --ffn 32 --vocab 300 --seq 32 " \
    "--batch 2 --steps 12 --max-tokens 8"

TEST(demo_script_end_to_end) {
    const char *corpus = make_corpus();
    REQUIRE(corpus);
    const char *dir = test_path("runs");
    int rc = demo(TINY " --corpus '%s' --dir '%s'", corpus, dir);
    REQUIREF(rc == 0, "exit %d:\n%s", rc, cli_out);
    CHECKF(cli_has("== 5. training") && cli_has("== 8. generate"), "%s", cli_out);
    CHECKF(cli_has("validation loss (final)") && cli_has("parameters") && cli_has("tokens trained") &&
               cli_has("DIFF - Tr."),
           "%s", cli_out);
    CHECKF(cli_has("tokens trained                          768            768"), "%s", cli_out); /* 12 x 2 x 32 */
    CHECKF(cli_has("[DIFF]") && cli_has("[Transformer]") && cli_has("My fellow Americans,") &&
               cli_has("The state of the Union is"),
           "%s", cli_out);
    CHECKF(cli_has("== timings") && cli_has("total"), "%s", cli_out);
    char path[600];
    struct stat st;
    const char *files[] = {"diff.safetensors", "transformer.safetensors", "diff.jsonl", "transformer.jsonl",
                           "results.txt", "samples.txt", "settings.txt"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        CHECKF(stat(path, &st) == 0 && st.st_size > 0, "%s is missing", path);
    }
    static char first[sizeof cli_out];
    snprintf(path, sizeof path, "%s/results.txt", dir);
    FILE *f = fopen(path, "r");
    REQUIRE(f);
    size_t n = fread(first, 1, sizeof first - 1, f);
    first[n] = '\0';
    fclose(f);

    /* a rerun reuses the tokenizer, the shards and both models, and reports the same table */
    rc = demo(TINY " --corpus '%s' --dir '%s'", corpus, dir);
    REQUIREF(rc == 0, "exit %d:\n%s", rc, cli_out);
    CHECKF(cli_has("reusing") && cli_has("already trained") && cli_has(first), "%s", cli_out);

    /* another setting starts the runs over */
    rc = demo(TINY " --lr 1e-3 --corpus '%s' --dir '%s'", corpus, dir);
    CHECKF(rc == 0 && cli_has("starting over") && !cli_has("already trained"), "exit %d:\n%s", rc, cli_out);
}

TEST(demo_script_usage_errors) {
    int rc = demo("--dim 100 --heads 4");
    CHECKF(rc == 2 && cli_has("multiple of 2 x --heads"), "exit %d: %s", rc, cli_out);
    rc = demo("--steps 10 --minutes 1");
    CHECKF(rc == 2 && cli_has("not both"), "exit %d: %s", rc, cli_out);
    rc = demo("--precision fp16");
    CHECKF(rc == 2 && cli_has("fp32 or bf16"), "exit %d: %s", rc, cli_out);
    rc = demo("--bogus");
    CHECKF(rc == 2 && cli_has("unknown flag --bogus"), "exit %d: %s", rc, cli_out);
    rc = demo("--steps 0");
    CHECKF(rc == 2 && cli_has("--steps must be a positive integer"), "exit %d: %s", rc, cli_out);
    /* a corpus without train/ and val/ fails in the data step, naming it */
    rc = demo("--corpus '%s' --dir '%s'", test_tmpdir(), test_path("runs2"));
    CHECKF(rc == 1 && cli_has("[data]") && cli_has("is not a folder"), "exit %d: %s", rc, cli_out);
}
