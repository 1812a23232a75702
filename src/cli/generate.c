/* difftx generate: continue a text prompt with the KV-cached decoder
 * (docs/generate.md). The prompt is encoded with the tokenizer, prefilled in
 * one batched pass, then tokens are sampled and fed back one at a time; each
 * token's bytes go to stdout as soon as it is sampled. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "difftx.h"

int cmd_generate(int argc, char **argv);

static const char *CMD = "generate";

static const char USAGE[] =
    "usage: difftx generate --model MODEL.safetensors --tokenizer TOK [--prompt TEXT]\n"
    "                       [--max-tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
    "                       [--seed S] [--precision fp32|bf16] [--kv-cache auto|fp32|bf16]\n"
    "                       [--no-bos] [--special]\n"
    "\n"
    "Continues a text prompt (--prompt, or all of stdin, bytes as they are) and\n"
    "streams the new text to stdout token by token. The prompt is encoded with the\n"
    "tokenizer, after its BOS when it has one (<|bos|>; a Hugging Face tokenizer's\n"
    "bos_token, <s> for SentencePiece); it is processed in one batched pass\n"
    "(prefill), then each new token is one cached decode step. Generation stops\n"
    "after N tokens, at its EOS (not printed: <|eos|> or <|endoftext|>; eos_token,\n"
    "</s>), or when the sequence reaches the model's max_seq_len. At the end\n"
    "one line on stderr gives the prefill and decode speeds.\n"
    "\n";

typedef struct {
    const char *model, *tokenizer, *prompt;
    int64_t max_tokens;
    double temperature, top_p;
    int64_t top_k;
    uint64_t seed;
    int precision, kv_cache, no_bos, special;
} gen_args;


/* All of stdin; NULL (after the message) on failure. */
static char *read_stdin(size_t *len) {
    char *b;
    if (dtx_read_stream(stdin, "stdin", &b, len) != DTX_OK) {
        runtime_error(CMD, "%s", dtx_last_error());
        return NULL;
    }
    return b;
}

/* The prompt's ids (after <|bos|> unless --no-bos) into *ids (malloc'd). */
static int encode_prompt(const gen_args *a, const dtx_tokenizer *t, int32_t **ids, int64_t *n) {
    size_t len;
    char *text = NULL;
    if (a->prompt) {
        len = strlen(a->prompt);
    } else {
        if (!(text = read_stdin(&len))) return EXIT_RUNTIME;
    }
    int32_t *enc = NULL;
    int64_t m = 0;
    dtx_status st = dtx_tokenizer_encode(t, a->prompt ? a->prompt : text, len,
                                         a->special ? DTX_ENCODE_SPECIAL : DTX_ENCODE_ORDINARY, &enc, &m);
    free(text);
    if (st) return lib_error(CMD);
    int32_t bos = a->no_bos ? -1 : dtx_tokenizer_bos(t);
    int64_t total = m + (bos >= 0);
    int32_t *out = malloc((size_t)(total ? total : 1) * sizeof *out);
    if (!out) {
        free(enc);
        return runtime_error(CMD, "out of memory");
    }
    if (bos >= 0) out[0] = bos;
    if (m) memcpy(out + (bos >= 0), enc, (size_t)m * sizeof *out);
    free(enc);
    *ids = out;
    *n = total;
    return EXIT_OK;
}

/* Writes one token's bytes (a special token: its text; an id with no token:
 * nothing); *last receives the last byte written. */
static void emit(const dtx_tokenizer *t, int32_t id, int *last) {
    char *s = NULL;
    size_t len = 0;
    if (dtx_tokenizer_decode(t, &id, 1, &s, &len) != DTX_OK) return;
    if (len) {
        fwrite(s, 1, len, stdout);
        fflush(stdout);
        *last = (unsigned char)s[len - 1];
    }
    free(s);
}

static int generate(dtx_model *m, const dtx_tokenizer *t, const gen_args *a, const int32_t *prompt, int64_t n) {
    const dtx_config *c = dtx_model_config(m);
    int64_t V = c->vocab_size, Vt = dtx_tokenizer_vocab_size(t);
    int64_t Vs = Vt < V ? Vt : V; /* sample only ids the tokenizer can print */
    int32_t eos = dtx_tokenizer_eos(t);
    /* Token j (1-based) comes from the logits at position n + j − 2; the
     * sequence stays within max_seq_len, so the cache needs at most
     * min(n + max_tokens, max_seq_len) − 1 positions (n <= that). */
    int64_t end = n + a->max_tokens < c->max_seq_len ? n + a->max_tokens : c->max_seq_len;
    dtx_kvcache *cache = NULL;
    dtx_real *logits = malloc((size_t)V * sizeof *logits);
    if (!logits) return runtime_error(CMD, "out of memory");
    if (dtx_kvcache_init_type(&cache, m, end - 1, DTX_KV_CHOICE_TYPE(m, a->kv_cache)) != DTX_OK) {
        free(logits);
        return lib_error(CMD);
    }
    dtx_sampler s = {.temperature = a->temperature, .top_k = a->top_k, .top_p = a->top_p, .seed = a->seed};
    dtx_rng rng;
    dtx_rng_seed(&rng, a->seed);
    int rc = EXIT_OK, last = '\n';
    double t0 = dtx_now_s();
    if (dtx_model_prefill(m, cache, prompt, n, logits) != DTX_OK) rc = lib_error(CMD);
    double t1 = dtx_now_s(), t2 = t1;
    int64_t generated = 0, decoded = 0;
    while (rc == EXIT_OK) {
        int32_t tok;
        if (dtx_sample_logits(&s, &rng, logits, Vs, &tok) != DTX_OK) {
            rc = lib_error(CMD);
            break;
        }
        if (tok == eos) break;
        emit(t, tok, &last);
        if (++generated == a->max_tokens || dtx_kvcache_len(cache) == dtx_kvcache_max_len(cache)) break;
        if (dtx_model_decode(m, cache, tok, logits) != DTX_OK) {
            rc = lib_error(CMD);
            break;
        }
        decoded++;
        t2 = dtx_now_s();
    }
    const dtx_kv_type kvt = dtx_kvcache_type(cache);
    dtx_kvcache_free(cache);
    free(logits);
    if (rc != EXIT_OK) return rc;
    if (last != '\n' && isatty(STDOUT_FILENO)) putchar('\n');
    if ((rc = finish_stdout(CMD)) != EXIT_OK) return rc;
    double pre_ms = (t1 - t0) * 1e3, dec_ms = (t2 - t1) * 1e3;
    fprintf(stderr,
            "prefill: %lld tokens in %.1f ms (%.1f tok/s); decode: %lld tokens in %.1f ms (%.1f tok/s); KV cache %s\n",
            (long long)n, pre_ms, pre_ms > 0 ? n / (pre_ms * 1e-3) : 0.0, (long long)decoded, dec_ms,
            dec_ms > 0 ? decoded / (dec_ms * 1e-3) : 0.0, dtx_kv_type_name(kvt));
    return EXIT_OK;
}

int cmd_generate(int argc, char **argv) {
    gen_args a = {.max_tokens = 200, .temperature = 0.8, .top_p = 1.0, .seed = 1};
    flag fl[] = {
        DTX_FLAG_MODEL(&a.model),
        FLAG_STR("--tokenizer", &a.tokenizer, .metavar = "PATH",
                 .help = "a tokenizer: ours, tiktoken, tokenizer.json, tokenizer.model or an HF folder", .required = 1),
        FLAG_STR("--prompt", &a.prompt, .metavar = "TEXT", .help = "the prompt (default: read stdin to the end)"),
        FLAG_INT("--max-tokens", &a.max_tokens, 1, 1 << 24, .metavar = "N",
                 .help = "most tokens to generate (default 200)"),
        FLAG_REAL("--temperature", &a.temperature, 0, 0, 1e6, 0, .metavar = "T",
                  .help = "0 = greedy, else softmax(logits / T) (default 0.8)"),
        FLAG_INT("--top-k", &a.top_k, 0, INT32_MAX, .metavar = "K",
                 .help = "sample among the K most probable tokens (default 0 = off)"),
        FLAG_REAL("--top-p", &a.top_p, 0, 1, 1, 0, .metavar = "P",
                  .help = "then among the fewest whose probability reaches P (nucleus; default 1 = off)"),
        FLAG_SEED("--seed", &a.seed, .metavar = "S", .help = "sampler seed (default 1)"),
        DTX_FLAG_PRECISION(&a.precision),
        DTX_FLAG_KV_CACHE(&a.kv_cache),
        FLAG_BOOL("--no-bos", &a.no_bos, 1, .help = "do not start the prompt with the tokenizer's BOS"),
        FLAG_BOOL("--special", &a.special, 1,
                  .help = "special-token text in the prompt (\"<|eos|>\") becomes its id; without it, it is encoded as "
                          "plain text"),
    };
    switch (flags_parse(CMD, USAGE, fl, (int)(sizeof fl / sizeof fl[0]), argc, argv, NULL, 0, NULL)) {
    case FLAGS_HELP: return finish_stdout(CMD);
    case FLAGS_ERROR: return EXIT_USAGE;
    }
    if (!a.prompt && isatty(STDIN_FILENO)) /* it would wait for a prompt typed to the end (Ctrl-D) */
        return usage_error(CMD, "no --prompt, and stdin is a terminal: give --prompt TEXT, or pipe the prompt in");
    dtx_tokenizer *t = NULL;
    dtx_model *m = NULL;
    int32_t *prompt = NULL;
    int64_t n = 0;
    int rc = cli_load_model_and_tokenizer(CMD, a.model, a.tokenizer, a.precision, &m, &t);
    const dtx_config *c = rc == EXIT_OK ? dtx_model_config(m) : NULL;
    if (rc == EXIT_OK) rc = encode_prompt(&a, t, &prompt, &n);
    if (rc == EXIT_OK && n == 0)
        rc = usage_error(CMD, "the prompt is empty and there is no <|bos|> to start from (give --prompt TEXT)");
    if (rc == EXIT_OK && n > c->max_seq_len - 1)
        rc = usage_error(CMD,
                         "the prompt is %lld tokens; the model's max_seq_len %lld leaves room for at most %lld "
                         "(one position is kept for the first new token)",
                         (long long)n, (long long)c->max_seq_len, (long long)(c->max_seq_len - 1));
    if (rc == EXIT_OK) rc = generate(m, t, &a, prompt, n);
    free(prompt);
    dtx_model_free(m);
    dtx_tokenizer_free(t);
    return rc;
}
