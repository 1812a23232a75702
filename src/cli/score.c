/* difftx score: the mean next-token cross-entropy of one token sequence,
 * printed as one JSON line (interop.md "Scoring from the command line"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "difftx.h"

static const char *CMD = "score";

static const char USAGE[] =
    "usage: difftx score --model MODEL.safetensors --tokens FILE\n"
    "\n"
    "Scores FILE (whitespace-separated token ids, or a token shard) as ONE sequence\n"
    "of n tokens, 2 <= n <= max_seq_len; the first token is context only. Prints\n"
    "  {\"loss\": <mean next-token cross-entropy in nats>, \"tokens\": <n - 1>}\n"
    "on stdout.\n"
    "\n";

static int score(dtx_model *m, const char *path) {
    const dtx_config *c = dtx_model_config(m);
    int32_t *tok = NULL;
    int64_t n = 0;
    if (dtx_tokens_read(path, c->vocab_size, &tok, &n) != DTX_OK) return lib_error(CMD);
    int rc = EXIT_OK;
    if (n < 2 || n > c->max_seq_len) {
        rc = runtime_error(CMD, "%s holds %lld token%s; a scored sequence has 2 to max_seq_len = %lld tokens", path,
                           (long long)n, n == 1 ? "" : "s", (long long)c->max_seq_len);
    } else {
        /* Inputs tok[0..n-1), targets tok[1..n): n-1 predictions. */
        double loss = NAN;
        if (dtx_model_forward(m, tok, tok + 1, 1, n - 1, NULL, &loss) != DTX_OK) rc = lib_error(CMD);
        else if (!isfinite(loss)) rc = runtime_error(CMD, "the loss is not finite (%g)", loss);
        else printf("{\"loss\": %.9g, \"tokens\": %lld}\n", loss, (long long)(n - 1));
    }
    free(tok);
    return rc;
}

int cmd_score(int argc, char **argv) {
    const char *model_path = NULL, *tokens_path = NULL;
    int precision = DTX_PREC_FP32;
    flag fl[] = {
        DTX_FLAG_MODEL(&model_path),
        FLAG_STR("--tokens", &tokens_path, .metavar = "FILE", .help = "the sequence", .required = 1),
        DTX_FLAG_PRECISION(&precision),
    };
    switch (flags_parse(CMD, USAGE, fl, (int)(sizeof fl / sizeof fl[0]), argc, argv, NULL, 0, NULL)) {
    case FLAGS_HELP: return finish_stdout(CMD);
    case FLAGS_ERROR: return EXIT_USAGE;
    }
    dtx_model *m = NULL;
    if (cli_model_load(&m, model_path, precision) != DTX_OK) return lib_error(CMD);
    int rc = score(m, tokens_path);
    dtx_model_free(m);
    return rc == EXIT_OK ? finish_stdout(CMD) : rc;
}
