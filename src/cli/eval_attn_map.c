/* difftx eval attn-map: one prompt's attention maps for a chosen layer and
 * head, as JSON for tools/plot_eval.py attn-map (spec §6.5,
 * docs/eval_probe.md): DIFF's two softmax maps and their difference
 * A1 − λA2, or the Transformer's one map. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "common/common.h"
#include "difftx.h"
#include "eval/probe.h"

static const char *CMD = "eval attn-map";

static const char USAGE[] =
    "usage: difftx eval attn-map --model MODEL.safetensors --tokenizer TOK\n"
    "                            (--text \"STRING\" | --prompt-file FILE) --json OUT\n"
    "                            [--layer L] [--head H] [--precision fp32|bf16]\n"
    "\n"
    "Runs one prompt (<|bos|> when the tokenizer has it, then the encoded text, cut to\n"
    "the model's max_seq_len) through the model and writes the attention maps of one\n"
    "layer and head as JSON: for DIFF the two softmax maps A1, A2 and the weights the\n"
    "head uses, A1 - lambda*A2; for the Transformer its one map. Every map is the full\n"
    "T x T matrix (query rows, key columns; zeros above the diagonal). Draw it with\n"
    "  tools/plot_eval.py attn-map OUT.json [BASELINE.json] --out PNG\n"
    "\n"
    "  --model PATH        model file                                      [required]\n"
    "  --tokenizer PATH    tokenizer file                                  [required]\n"
    "  --text STRING       the prompt\n"
    "  --prompt-file FILE  the prompt, read from a file (bytes as they are)\n"
    "  --layer L           layer, 0-based (default 0)\n"
    "  --head H            head, 0-based (default 0): a DIFF head, or a Transformer head\n"
    "  --json OUT          where to write the maps (atomically)            [required]\n"
    "  --precision fp32|bf16  matrix products in fp32 (default), or with bf16\n"
    "                      operands and fp32 accumulation\n";

typedef struct {
    const char *model, *tokenizer, *text, *prompt_file, *json;
    int64_t layer, head;
    int precision;
} map_args;

/* The prompt as run: ids [T] and how long it was before the cut. */
typedef struct {
    int32_t *ids;
    int64_t T, full;
} prompt;

/* ------------------------------------------------------------ prompt */

static int encode_prompt(const map_args *a, const dtx_tokenizer *t, int64_t max_len, prompt *p) {
    char *file = NULL;
    size_t len = 0;
    if (a->prompt_file && dtx_read_file(a->prompt_file, &file, &len) != DTX_OK) return lib_error(CMD);
    const char *text = file ? file : a->text;
    if (!file) len = strlen(text);
    int32_t *enc = NULL;
    int64_t n = 0;
    dtx_status st = dtx_tokenizer_encode(t, text, len, DTX_ENCODE_ORDINARY, &enc, &n);
    free(file);
    if (st) return lib_error(CMD);
    int32_t bos = dtx_tokenizer_token_id(t, "<|bos|>");
    p->full = n + (bos >= 0);
    p->T = p->full < max_len ? p->full : max_len;
    p->ids = malloc((size_t)(p->T ? p->T : 1) * sizeof *p->ids);
    if (!p->ids) {
        free(enc);
        return runtime_error(CMD, "out of memory");
    }
    if (bos >= 0) p->ids[0] = bos;
    if (p->T > (bos >= 0)) memcpy(p->ids + (bos >= 0), enc, (size_t)(p->T - (bos >= 0)) * sizeof *enc);
    free(enc);
    if (p->T == 0) return usage_error(CMD, "the prompt is empty and the tokenizer has no <|bos|>");
    return EXIT_OK;
}

/* ------------------------------------------------------------ JSON */

/* Length of the valid UTF-8 sequence at s[0..n), 0 when it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    size_t k = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!k || k > n) return 0;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    /* overlong forms, surrogates and code points past U+10FFFF */
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) ||
        (c == 0xF4 && s[1] > 0x8F))
        return 0;
    return k;
}

/* A token's bytes as a JSON string. A token may hold part of a UTF-8
 * character; such bytes (and any invalid UTF-8) become the text \xNN, so the
 * file stays valid JSON and the label still shows the byte. */
static void json_bytes(FILE *f, const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < len;) {
        unsigned char c = u[i];
        size_t k = c < 0x80 ? 1 : utf8_len(u + i, len - i);
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == 0x7F) fprintf(f, "\\u%04x", c);
        else if (k) fwrite(u + i, 1, k, f);
        else fprintf(f, "\\\\x%02x", c);
        i += k ? k : 1;
    }
    fputc('"', f);
}

static void json_token(FILE *f, const dtx_tokenizer *t, int32_t id) {
    char *s = NULL;
    size_t len = 0;
    if (dtx_tokenizer_decode(t, &id, 1, &s, &len) != DTX_OK) {
        fprintf(f, "\"<%ld>\"", (long)id); /* an id the tokenizer lacks (model vocab is larger) */
        return;
    }
    json_bytes(f, s, len);
    free(s);
}

/* One map, T rows of T values (zeros above the diagonal). row: [T] scratch. */
static int json_map(FILE *f, const dtx_model *m, const map_args *a, dtx_probe_map map, int64_t T, double *row) {
    fputs("[", f);
    for (int64_t t = 0; t < T; t++) {
        if (dtx_probe_attention_row(m, 0, a->layer, a->head, map, t, row) != DTX_OK) return -1;
        fputs(t ? ",\n   [" : "\n   [", f);
        for (int64_t s = 0; s < T; s++) {
            if (s) fputc(',', f);
            if (s <= t) fprintf(f, "%.9g", row[s]);
            else fputc('0', f);
        }
        fputc(']', f);
    }
    fputs("]", f);
    return 0;
}

static int json_body(FILE *f, const dtx_model *m, const dtx_tokenizer *tok, const map_args *a, const prompt *p,
                     double *row) {
    int diff = dtx_model_config(m)->arch != DTX_ARCH_TRANSFORMER; /* two maps a head */
    fprintf(f, "{\"arch\": \"%s\", \"layer\": %lld, \"head\": %lld, \"lambda\": ", dtx_arch_name(dtx_model_config(m)->arch),
            (long long)a->layer, (long long)a->head);
    if (diff) fprintf(f, "%.9g", dtx_probe_lambda(m, a->layer));
    else fputs("null", f);
    if (dtx_model_config(m)->arch == DTX_ARCH_DIFF2) { /* V2: λ per token; "lambda" is their mean */
        fputs(", \"lambda_rows\": [", f);
        for (int64_t t = 0; t < p->T; t++) fprintf(f, "%s%.9g", t ? ", " : "", dtx_probe_lambda_row(m, 0, a->layer, a->head, t));
        fputs("]", f);
    }
    fprintf(f, ", \"T\": %lld, \"prompt_tokens\": %lld,\n \"ids\": [", (long long)p->T, (long long)p->full);
    for (int64_t i = 0; i < p->T; i++) fprintf(f, "%s%ld", i ? ", " : "", (long)p->ids[i]);
    fputs("],\n \"tokens\": [", f);
    for (int64_t i = 0; i < p->T; i++) {
        if (i) fputs(", ", f);
        json_token(f, tok, p->ids[i]);
    }
    fputs("],\n \"maps\": {\n  \"a1\": ", f);
    if (json_map(f, m, a, DTX_PROBE_A1, p->T, row)) return -1;
    if (diff) {
        fputs(",\n  \"a2\": ", f);
        if (json_map(f, m, a, DTX_PROBE_A2, p->T, row)) return -1;
        fputs(",\n  \"diff\": ", f);
        if (json_map(f, m, a, DTX_PROBE_DIFF, p->T, row)) return -1;
    }
    fputs("}}\n", f);
    return 0;
}

/* The --json file, built in memory and written atomically
 * (dtx_write_file_atomic: in place when PATH is /dev/stdout or a FIFO). */
static int write_json(const map_args *a, const dtx_model *m, const dtx_tokenizer *tok, const prompt *p) {
    double *row = malloc((size_t)p->T * sizeof *row);
    char *text = NULL;
    size_t len = 0;
    FILE *f = row ? open_memstream(&text, &len) : NULL;
    if (!f) {
        free(row);
        return runtime_error(CMD, "--json %s: out of memory building the JSON", a->json);
    }
    int rc = json_body(f, m, tok, a, p, row) == 0 ? EXIT_OK : lib_error(CMD);
    int bad = ferror(f);
    bad |= fclose(f) != 0; /* closing sets text and len */
    if (rc == EXIT_OK && bad) rc = runtime_error(CMD, "--json %s: out of memory building the JSON", a->json);
    if (rc == EXIT_OK && dtx_write_file_atomic(a->json, text, len) != DTX_OK) rc = lib_error(CMD);
    free(text);
    free(row);
    return rc;
}

/* ------------------------------------------------------------ summary */

/* A token as a short quoted label on stdout. */
static void print_token(const dtx_tokenizer *t, int32_t id) {
    json_token(stdout, t, id);
}

static int summarise(const dtx_model *m, const dtx_tokenizer *tok, const map_args *a, const prompt *p) {
    int diff = dtx_model_config(m)->arch != DTX_ARCH_TRANSFORMER; /* two maps a head */
    int64_t T = p->T, best = 0;
    double *row = malloc((size_t)T * sizeof *row);
    if (!row) return runtime_error(CMD, "out of memory");
    if (dtx_probe_attention_row(m, 0, a->layer, a->head, DTX_PROBE_DIFF, T - 1, row) != DTX_OK) {
        free(row);
        return lib_error(CMD);
    }
    for (int64_t s = 1; s < T; s++) best = row[s] > row[best] ? s : best;
    printf("%s, layer %lld, head %lld: T = %lld tokens", dtx_arch_name(dtx_model_config(m)->arch),
           (long long)a->layer, (long long)a->head, (long long)T);
    if (p->full > T) printf(" (the prompt's %lld cut to max_seq_len)", (long long)p->full);
    if (diff) printf(", lambda = %.6g", dtx_probe_lambda(m, a->layer));
    printf("\nlast row (query %lld ", (long long)(T - 1));
    print_token(tok, p->ids[T - 1]);
    printf("): most attended key %lld ", (long long)best);
    print_token(tok, p->ids[best]);
    printf(" with weight %.4f%s\nwrote %s\n", row[best], diff ? " (A1 - lambda*A2)" : "", a->json);
    free(row);
    return EXIT_OK;
}

/* ------------------------------------------------------------ command */

static int check_args(const map_args *a) {
    if (!a->model) return usage_error(CMD, "--model is required");
    if (!a->tokenizer) return usage_error(CMD, "--tokenizer is required");
    if (!a->json) return usage_error(CMD, "--json is required");
    if (!a->text && !a->prompt_file) return usage_error(CMD, "give the prompt: --text STRING or --prompt-file FILE");
    if (a->text && a->prompt_file) return usage_error(CMD, "--text and --prompt-file exclude each other");
    return EXIT_OK;
}

static int check_against_model(const map_args *a, const dtx_config *c, const dtx_tokenizer *t) {
    if (a->layer >= c->n_layers)
        return usage_error(CMD, "--layer %lld: the model has %lld layers (0..%lld)", (long long)a->layer,
                           (long long)c->n_layers, (long long)(c->n_layers - 1));
    if (a->head >= c->n_heads)
        return usage_error(CMD, "--head %lld: the model has %lld %sheads (0..%lld)", (long long)a->head,
                           (long long)c->n_heads, c->arch != DTX_ARCH_TRANSFORMER ? "differential " : "",
                           (long long)(c->n_heads - 1));
    if (dtx_tokenizer_vocab_size(t) > c->vocab_size)
        return runtime_error(CMD, "the tokenizer %s has %lld tokens, more than the model's vocab_size %lld",
                             a->tokenizer, (long long)dtx_tokenizer_vocab_size(t), (long long)c->vocab_size);
    return EXIT_OK;
}

static int run(dtx_model *m, const dtx_tokenizer *t, const map_args *a) {
    const dtx_config *c = dtx_model_config(m);
    prompt p = {0};
    int rc = check_against_model(a, c, t);
    if (rc == EXIT_OK) rc = encode_prompt(a, t, c->max_seq_len, &p);
    if (rc == EXIT_OK && dtx_model_forward(m, p.ids, NULL, 1, p.T, NULL, NULL) != DTX_OK) rc = lib_error(CMD);
    if (rc == EXIT_OK) rc = write_json(a, m, t, &p);
    if (rc == EXIT_OK) rc = summarise(m, t, a, &p);
    free(p.ids);
    return rc;
}

int cmd_eval_attn_map(int argc, char **argv) {
    map_args a = {0};
    flag fl[] = {
        FLAG_STR("--model", &a.model),
        FLAG_STR("--tokenizer", &a.tokenizer),
        FLAG_STR("--text", &a.text),
        FLAG_STR("--prompt-file", &a.prompt_file),
        FLAG_INT("--layer", &a.layer, 0, INT32_MAX),
        FLAG_INT("--head", &a.head, 0, INT32_MAX),
        FLAG_STR("--json", &a.json),
        FLAG_CHOICE("--precision", &a.precision, "fp32|bf16"),
    };
    switch (flags_parse(CMD, USAGE, fl, (int)(sizeof fl / sizeof fl[0]), argc, argv, NULL, 0, NULL)) {
    case FLAGS_HELP: return finish_stdout(CMD);
    case FLAGS_ERROR: return EXIT_USAGE;
    }
    int rc = check_args(&a);
    if (rc != EXIT_OK) return rc;
    dtx_tokenizer *t = NULL;
    dtx_model *m = NULL;
    if (dtx_tokenizer_load(&t, a.tokenizer) != DTX_OK) return lib_error(CMD);
    if (cli_model_load(&m, a.model, a.precision) != DTX_OK) rc = lib_error(CMD);
    if (rc == EXIT_OK) rc = run(m, t, &a);
    dtx_model_free(m);
    dtx_tokenizer_free(t);
    return rc == EXIT_OK ? finish_stdout(CMD) : rc;
}
