/* difftx sample: continue a prompt of token ids, greedily or with a temperature. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "difftx.h"

static const char *CMD = "sample";

static const char USAGE[] =
    "usage: difftx sample --model MODEL.safetensors (--prompt \"IDS\" | --prompt-file FILE)\n"
    "                     --max-tokens N [--temperature T] [--seed S]\n"
    "\n"
    "Appends N token ids to the prompt and prints prompt and continuation on one\n"
    "line, space-separated. Prompt plus N must fit in the model's max_seq_len.\n"
    "\n";

typedef struct {
    const char *model, *prompt, *prompt_file;
    int64_t max_tokens;
    double temperature;
    uint64_t seed;
    int precision;
} sample_args;

/* Parses the --prompt string into *out (malloc'd). Usage errors print. */
static int parse_prompt(const char *s, int32_t **out, int64_t *n_out) {
    size_t cap = strlen(s) / 2 + 1; /* ids are separated by at least one space */
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return runtime_error(CMD, "out of memory reading --prompt");
    int64_t n = 0;
    const char *p = s;
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        size_t len = strcspn(p, " \t\r\n\v\f");
        char word[32];
        int64_t v = -1;
        if (len < sizeof word) {
            memcpy(word, p, len);
            word[len] = '\0';
            if (dtx_parse_i64(word, &v) != 0) v = -1;
        }
        if (v < 0 || v > INT32_MAX) {
            free(ids);
            return usage_error(CMD, "--prompt: token %lld '%.*s' is not a non-negative integer id", (long long)n,
                               (int)(len < 40 ? len : 40), p);
        }
        ids[n++] = (int32_t)v;
        p += len;
    }
    if (n == 0) {
        free(ids);
        return usage_error(CMD, "--prompt: expected at least one token id, got '%s'", s);
    }
    *out = ids;
    *n_out = n;
    return EXIT_OK;
}

/* --prompt-file, or the range check of an already parsed --prompt. */
static int finish_prompt(const sample_args *a, const dtx_config *c, int32_t **ids, int64_t *n) {
    if (a->prompt_file) {
        if (dtx_tokens_read(a->prompt_file, c->vocab_size, ids, n) != DTX_OK) return lib_error(CMD);
        if (*n == 0) return runtime_error(CMD, "%s holds no token ids; the prompt needs at least one", a->prompt_file);
        return EXIT_OK;
    }
    for (int64_t i = 0; i < *n; i++)
        if ((*ids)[i] >= c->vocab_size)
            return usage_error(CMD, "--prompt: token %lld has id %d, out of range for vocab_size %lld",
                               (long long)i, (*ids)[i], (long long)c->vocab_size);
    return EXIT_OK;
}

static int generate(dtx_model *m, const sample_args *a, const int32_t *prompt, int64_t n) {
    const dtx_config *c = dtx_model_config(m);
    if (n + a->max_tokens > c->max_seq_len)
        return usage_error(CMD, "--max-tokens: a prompt of %lld plus %lld new tokens exceeds max_seq_len %lld",
                           (long long)n, (long long)a->max_tokens, (long long)c->max_seq_len);
    int32_t *out = malloc((size_t)(n + a->max_tokens) * sizeof *out);
    if (!out) return runtime_error(CMD, "out of memory");
    int rc = EXIT_OK;
    if (dtx_sample(m, prompt, n, a->max_tokens, a->temperature, a->seed, out) != DTX_OK) rc = lib_error(CMD);
    for (int64_t i = 0; rc == EXIT_OK && i < n + a->max_tokens; i++) printf(i ? " %d" : "%d", out[i]);
    if (rc == EXIT_OK) putchar('\n');
    free(out);
    return rc;
}

int cmd_sample(int argc, char **argv) {
    sample_args a = {.max_tokens = -1, .seed = 1};
    flag fl[] = {
        DTX_FLAG_MODEL(&a.model),
        FLAG_STR("--prompt", &a.prompt, .metavar = "IDS", .help = "whitespace-separated token ids"),
        FLAG_STR("--prompt-file", &a.prompt_file, .metavar = "FILE",
                 .help = "token ids from a file (text or token shard)"),
        FLAG_INT("--max-tokens", &a.max_tokens, 0, 1 << 24, .metavar = "N",
                 .help = "how many ids to generate", .required = 1),
        FLAG_REAL("--temperature", &a.temperature, 0, 0, 1e6, 0, .metavar = "T",
                  .help = "0 = greedy (default), else softmax(logits / T) sampling"),
        FLAG_SEED("--seed", &a.seed, .metavar = "S", .help = "sampler seed (default 1)"),
        DTX_FLAG_PRECISION(&a.precision),
    };
    switch (flags_parse(CMD, USAGE, fl, (int)(sizeof fl / sizeof fl[0]), argc, argv, NULL, 0, NULL)) {
    case FLAGS_HELP: return finish_stdout(CMD);
    case FLAGS_ERROR: return EXIT_USAGE;
    }
    if (!a.prompt == !a.prompt_file) return usage_error(CMD, "give exactly one of --prompt and --prompt-file");
    int32_t *prompt = NULL;
    int64_t n = 0;
    /* A malformed --prompt is a usage error even before the model is read. */
    int rc = a.prompt ? parse_prompt(a.prompt, &prompt, &n) : EXIT_OK;
    if (rc != EXIT_OK) return rc;
    dtx_model *m = NULL;
    if (cli_model_load(&m, a.model, a.precision) != DTX_OK) rc = lib_error(CMD);
    if (rc == EXIT_OK) rc = finish_prompt(&a, dtx_model_config(m), &prompt, &n);
    if (rc == EXIT_OK) rc = generate(m, &a, prompt, n);
    dtx_model_free(m);
    free(prompt);
    return rc == EXIT_OK ? finish_stdout(CMD) : rc;
}
