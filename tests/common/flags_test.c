/* The flag table (difftx.h "flags"): what dtx_flags_parse stores and
 * refuses, and the usage dtx_flags_usage writes from the same table: the
 * head as written, every listed flag with its value's name and words
 * wrapped at 80 columns, defaults read from the values the table points
 * at (none for zero, negative, none or a required flag), test hooks left
 * out, text entries as written; a required flag missing is refused. */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "difftx.h"
#include "test.h"

typedef struct {
    int64_t steps, window, required;
    double lr;
    const char *out;
    int arch, quiet, hook_seen;
    int64_t hook;
} opts;

#define TABLE(o)                                                                                                \
    {                                                                                                           \
        DTX_FLAG_TEXT("section:\n"),                                                                            \
        DTX_FLAG_INT("--steps", &(o).steps, 1, 1000000, .metavar = "N", .help = "optimizer steps"),             \
        DTX_FLAG_INT("--window", &(o).window, 0, 100, .metavar = "W", .help = "tokens per pass; 0: the model's"), \
        DTX_FLAG_INT("--required", &(o).required, 1, 9, .metavar = "R", .help = "a value", .required = 1),      \
        DTX_FLAG_REAL("--lr", &(o).lr, 0, 1, 1, 0, .metavar = "X", .help = "the rate"),                         \
        DTX_FLAG_STR("--out", &(o).out, .metavar = "PATH",                                                     \
                     .help = "where the words run on long enough that they must wrap onto a second line and "   \
                             "then a third one, each indented under the first word of the text"),               \
        DTX_FLAG_CHOICE("--arch", &(o).arch, "diff|transformer|diff2", .help = "the architecture"),             \
        DTX_FLAG_BOOL("--quiet", &(o).quiet, 1, .help = "say less"),                                            \
        DTX_FLAG_INT("--hook", &(o).hook, 1, 9),                                                                \
        DTX_FLAG_TEXT("a note at the end\n"),                                                                   \
    }

TEST(flags_usage_from_the_table) {
    opts o = {.steps = 8, .window = 0, .required = -1, .lr = 0.001, .out = "model.st", .arch = 1};
    dtx_flag fl[] = TABLE(o);
    int n = (int)(sizeof fl / sizeof fl[0]);
    char *u = dtx_flags_usage("usage: x [flags]\n\n", fl, n);
    REQUIRE(u);
    CHECK(strncmp(u, "usage: x [flags]\n\nsection:\n  --steps N", 37) == 0);
    CHECK(strstr(u, "  --steps N             optimizer steps (default 8)\n"));
    CHECK(strstr(u, "  --window W            tokens per pass; 0: the model's\n")); /* 0: no default said */
    CHECK(strstr(u, "  --required R          a value [required]\n"));
    CHECK(strstr(u, "  --lr X                the rate (default 0.001)\n"));
    CHECK(strstr(u, "  --arch diff|transformer|diff2  the architecture (default transformer)\n"));
    CHECK(strstr(u, "  --quiet               say less\n"));
    CHECK(!strstr(u, "--hook")); /* no words: a test hook, not listed */
    CHECK(strlen(u) > 18 && strcmp(u + strlen(u) - 18, "a note at the end\n") == 0);
    const char *out = strstr(u, "  --out PATH            where the words");
    CHECK(out && strstr(out, "(default model.st)"));
    int lines_of_out = 0;
    for (const char *p = u; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        CHECKF(len <= 80, "a line of %zu columns: %.*s", len, (int)len, p);
        if (p > out && out && p < out + 400 && strncmp(p, "                        ", 24) == 0 && p[24] != ' ')
            lines_of_out++;
        p += len + (nl != NULL);
    }
    CHECK(lines_of_out == 2);
    free(u);
}

TEST(flags_parse_stores_and_refuses) {
    opts o = {.steps = 8, .required = -1, .lr = 0.001, .arch = 0};
    dtx_flag fl[] = TABLE(o);
    int n = (int)(sizeof fl / sizeof fl[0]);
    char *ok[] = {"cmd", "--steps", "12", "--lr=0.5", "--arch", "diff2", "--quiet", "--hook", "3", "pos",
                  "--required", "2"};
    const char *pos[1];
    int n_pos = 0;
    CHECK(dtx_flags_parse("cmd", fl, n, 10, ok, pos, 1, &n_pos) == DTX_FLAGS_ERROR &&
          strcmp(dtx_last_error(), "--required is required") == 0);
    CHECK(dtx_flags_parse("cmd", fl, n, 12, ok, pos, 1, &n_pos) == DTX_FLAGS_OK && o.required == 2);
    CHECK(o.steps == 12 && o.lr == 0.5 && o.arch == 2 && o.quiet == 1 && o.hook == 3 && n_pos == 1);
    CHECK(dtx_flags_get(fl, n, "--steps")->seen && !dtx_flags_get(fl, n, "--window")->seen);
    CHECK(dtx_flags_get(fl, n, "--nope") == NULL);
    struct {
        const char *arg, *val, *words;
    } bad[] = {
        {"--steps", "0", "--steps: expected a positive integer up to 1000000, got '0'"},
        {"--lr", "0", "--lr: expected a number in (0, 1], got '0'"},
        {"--arch", "gpt", "--arch: expected one of diff|transformer|diff2, got 'gpt'"},
        {"--frob", "1", "unknown flag '--frob' (see 'difftx cmd --help')"},
        {"--out", "", "--out: expected a non-empty value, got ''"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[] = {"cmd", (char *)bad[i].arg, (char *)bad[i].val};
        CHECKF(dtx_flags_parse("cmd", fl, n, 3, argv, NULL, 0, NULL) == DTX_FLAGS_ERROR &&
                   dtx_last_status() == DTX_ERR_USAGE && strcmp(dtx_last_error(), bad[i].words) == 0,
               "%s %s: %s", bad[i].arg, bad[i].val, dtx_last_error());
    }
    char *help[] = {"cmd", "--steps", "x", "--help"}; /* --help is seen before the bad value is read */
    CHECK(dtx_flags_parse("cmd", fl, n, 4, help, NULL, 0, NULL) == DTX_FLAGS_ERROR);
    char *help2[] = {"cmd", "--help", "--steps", "x"};
    CHECK(dtx_flags_parse("cmd", fl, n, 4, help2, NULL, 0, NULL) == DTX_FLAGS_HELP);
}
