/* difftx eval attn-map: one prompt's attention maps for a chosen layer and
 * head, as JSON for tools/plot_eval.py attn-map (spec §6.5,
 * docs/eval_probe.md): DIFF's two softmax maps and their difference
 * A1 − λA2, or the Transformer's one map. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval_run.h"
#include "common/common.h"
#include "difftx.h"
#include "eval/probe.h"


static const char USAGE[] =
    "usage: difftx eval attn-map --model MODEL.safetensors --tokenizer TOK\n"
    "                            (--text \"STRING\" | --prompt-file FILE) [--json OUT]\n"
    "                            [--layer L] [--head H] [--precision fp32|bf16]\n"
    "\n"
    "Runs one prompt (<|bos|> when the tokenizer has it, then the encoded text, cut to\n"
    "the model's max_seq_len) through the model and writes the attention maps of one\n"
    "layer and head as JSON: for DIFF the two softmax maps A1, A2 and the weights the\n"
    "head uses, A1 - lambda*A2; for the Transformer its one map. Every map is the full\n"
    "T x T matrix (query rows, key columns; zeros above the diagonal). Draw it with\n"
    "  tools/plot_eval.py attn-map OUT.json [BASELINE.json] --out PNG\n"
    "\n";

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
    if (a->prompt_file && dtx_read_file(a->prompt_file, &file, &len) != DTX_OK) return eval_lib_error();
    const char *text = file ? file : a->text;
    if (!file) len = strlen(text);
    int32_t *enc = NULL;
    int64_t n = 0;
    dtx_status st = dtx_tokenizer_encode(t, text, len, DTX_ENCODE_ORDINARY, &enc, &n);
    free(file);
    if (st) return eval_lib_error();
    int32_t bos = dtx_tokenizer_bos(t);
    p->full = n + (bos >= 0);
    p->T = p->full < max_len ? p->full : max_len;
    p->ids = malloc((size_t)(p->T ? p->T : 1) * sizeof *p->ids);
    if (!p->ids) {
        free(enc);
        return eval_runtime_error("out of memory");
    }
    if (bos >= 0) p->ids[0] = bos;
    if (p->T > (bos >= 0)) memcpy(p->ids + (bos >= 0), enc, (size_t)(p->T - (bos >= 0)) * sizeof *enc);
    free(enc);
    if (p->T == 0) return eval_usage_error("the prompt is empty and the tokenizer has no <|bos|>");
    return EVAL_OK;
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

/* A token's label: its bytes, where a token holds part of a UTF-8 character
 * (or invalid UTF-8) those bytes as the text \xNN, so the label is valid
 * text and still shows the byte; "<ID>" for an id the tokenizer lacks (the
 * model's vocabulary is larger). malloc'd; NULL when out of memory. */
static char *token_label(const dtx_tokenizer *t, int32_t id) {
    char *s = NULL;
    size_t len = 0;
    if (dtx_tokenizer_decode(t, &id, 1, &s, &len) != DTX_OK) {
        char *l = malloc(24);
        if (l) snprintf(l, 24, "<%ld>", (long)id);
        return l;
    }
    char *out = malloc(4 * len + 1), *o = out;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; out && i < len;) {
        size_t k = u[i] < 0x80 ? 1 : utf8_len(u + i, len - i);
        if (k && u[i]) memcpy(o, u + i, k), o += k;
        else o += sprintf(o, "\\x%02x", u[i]); /* also a NUL byte, which would end the text */
        i += k ? k : 1;
    }
    if (out) *o = '\0';
    free(s);
    return out;
}

/* One map as T rows of T values (zeros above the diagonal). row: [T] scratch. */
static cJSON *json_map(const dtx_model *m, const map_args *a, dtx_attn_map map, int64_t T, double *row, int *ok) {
    cJSON *rows = cJSON_CreateArray();
    if (!rows) *ok = 0;
    for (int64_t t = 0; rows && t < T; t++) {
        if (dtx_probe_attention_row(m, 0, a->layer, a->head, map, t, row) != DTX_OK) {
            cJSON_Delete(rows);
            return NULL;
        }
        for (int64_t s = t + 1; s < T; s++) row[s] = 0;
        jadd(rows, NULL, jnum_array(row, T, 9), ok);
    }
    return rows;
}

/* The --json file (written atomically; in place when PATH is /dev/stdout or a FIFO). */
static int write_json(const map_args *a, const dtx_model *m, const dtx_tokenizer *tok, const prompt *p) {
    const dtx_config *c = dtx_model_config(m);
    int diff = c->arch != DTX_ARCH_TRANSFORMER; /* two maps a head */
    double *row = malloc((size_t)p->T * sizeof *row);
    cJSON *root = row ? cJSON_CreateObject() : NULL;
    int ok = root != NULL;
    if (root) {
        jstr(root, "arch", dtx_arch_name(c->arch), &ok);
        jint(root, "layer", a->layer, &ok);
        jint(root, "head", a->head, &ok);
        if (diff) jnum(root, "lambda", dtx_probe_lambda(m, a->layer), &ok);
        else jnull(root, "lambda", &ok);
        if (c->arch == DTX_ARCH_DIFF2) { /* V2: λ per token; "lambda" is their mean */
            for (int64_t t = 0; t < p->T; t++) row[t] = dtx_probe_lambda_row(m, 0, a->layer, a->head, t);
            jadd(root, "lambda_rows", jnum_array(row, p->T, 17), &ok);
        }
        jint(root, "T", p->T, &ok);
        jint(root, "prompt_tokens", p->full, &ok);
        cJSON *ids = jadd(root, "ids", cJSON_CreateArray(), &ok), *toks = jadd(root, "tokens", cJSON_CreateArray(), &ok);
        for (int64_t i = 0; ids && toks && i < p->T; i++) {
            jadd(ids, NULL, cJSON_CreateNumber(p->ids[i]), &ok);
            char *l = token_label(tok, p->ids[i]);
            jadd(toks, NULL, l ? cJSON_CreateString(l) : NULL, &ok);
            free(l);
        }
    }
    cJSON *maps = ok ? jadd(root, "maps", cJSON_CreateObject(), &ok) : NULL;
    int rc = EVAL_OK;
    static const dtx_attn_map which[3] = {DTX_MAP_FIRST, DTX_MAP_SECOND, DTX_MAP_COMBINED};
    static const char *const names[3] = {"a1", "a2", "diff"};
    for (int k = 0; maps && ok && rc == EVAL_OK && k < (diff ? 3 : 1); k++) {
        cJSON *mj = json_map(m, a, which[k], p->T, row, &ok);
        if (!mj && ok) rc = eval_lib_error();
        else jadd(maps, names[k], mj, &ok);
    }
    free(row);
    if (rc != EVAL_OK) {
        cJSON_Delete(root);
        return rc;
    }
    return eval_json(a->json, root, ok, 0);
}

/* ------------------------------------------------------------ summary */

/* A token as a short quoted label in the report. */
static void print_token(const dtx_tokenizer *t, int32_t id) {
    char *l = token_label(t, id);
    cJSON *j = l ? cJSON_CreateString(l) : NULL;
    char *q = j ? cJSON_PrintUnformatted(j) : NULL;
    eval_puts(q ? q : "?");
    free(q);
    cJSON_Delete(j);
    free(l);
}

static int summarise(const dtx_model *m, const dtx_tokenizer *tok, const map_args *a, const prompt *p) {
    int diff = dtx_model_config(m)->arch != DTX_ARCH_TRANSFORMER; /* two maps a head */
    int64_t T = p->T, best = 0;
    double *row = malloc((size_t)T * sizeof *row);
    if (!row) return eval_runtime_error("out of memory");
    if (dtx_probe_attention_row(m, 0, a->layer, a->head, DTX_MAP_COMBINED, T - 1, row) != DTX_OK) {
        free(row);
        return eval_lib_error();
    }
    for (int64_t s = 1; s < T; s++) best = row[s] > row[best] ? s : best;
    eval_printf("%s, layer %lld, head %lld: T = %lld tokens", dtx_arch_name(dtx_model_config(m)->arch),
           (long long)a->layer, (long long)a->head, (long long)T);
    if (p->full > T) eval_printf(" (the prompt's %lld cut to max_seq_len)", (long long)p->full);
    if (diff) eval_printf(", lambda = %.6g", dtx_probe_lambda(m, a->layer));
    eval_printf("\nlast row (query %lld ", (long long)(T - 1));
    print_token(tok, p->ids[T - 1]);
    eval_printf("): most attended key %lld ", (long long)best);
    print_token(tok, p->ids[best]);
    eval_printf(" with weight %.4f%s\n", row[best], diff ? " (A1 - lambda*A2)" : "");
    if (a->json) eval_printf("wrote %s\n", a->json);
    free(row);
    return EVAL_OK;
}

/* ------------------------------------------------------------ command */

static int check_args(const map_args *a) {
    if (!a->text && !a->prompt_file) return eval_usage_error("give the prompt: --text STRING or --prompt-file FILE");
    if (a->text && a->prompt_file) return eval_usage_error("--text and --prompt-file exclude each other");
    return EVAL_OK;
}

static int check_against_model(const map_args *a, const dtx_config *c, const dtx_tokenizer *t) {
    if (a->layer >= c->n_layers)
        return eval_usage_error("--layer %lld: the model has %lld layers (0..%lld)", (long long)a->layer,
                           (long long)c->n_layers, (long long)(c->n_layers - 1));
    if (a->head >= c->n_heads)
        return eval_usage_error("--head %lld: the model has %lld %sheads (0..%lld)", (long long)a->head,
                           (long long)c->n_heads, c->arch != DTX_ARCH_TRANSFORMER ? "differential " : "",
                           (long long)(c->n_heads - 1));
    if (dtx_tokenizer_vocab_size(t) > c->vocab_size)
        return eval_runtime_error("the tokenizer %s has %lld tokens, more than the model's vocab_size %lld",
                             a->tokenizer, (long long)dtx_tokenizer_vocab_size(t), (long long)c->vocab_size);
    return EVAL_OK;
}

static int run(dtx_model *m, const dtx_tokenizer *t, const map_args *a) {
    const dtx_config *c = dtx_model_config(m);
    prompt p = {0};
    int rc = check_against_model(a, c, t);
    if (rc == EVAL_OK) rc = encode_prompt(a, t, c->max_seq_len, &p);
    if (rc == EVAL_OK && dtx_model_forward(m, p.ids, NULL, 1, p.T, NULL, NULL) != DTX_OK) rc = eval_lib_error();
    if (rc == EVAL_OK) rc = write_json(a, m, t, &p);
    if (rc == EVAL_OK) rc = summarise(m, t, a, &p);
    free(p.ids);
    return rc;
}

int dtx_eval_attn_map_main(int argc, char **argv) {
    map_args a = {0};
    dtx_flag fl[] = {
        DTX_FLAG_MODEL(&a.model),
        DTX_FLAG_STR("--tokenizer", &a.tokenizer, .metavar = "PATH", .help = "tokenizer file", .required = 1),
        DTX_FLAG_STR("--text", &a.text, .metavar = "STRING", .help = "the prompt"),
        DTX_FLAG_STR("--prompt-file", &a.prompt_file, .metavar = "FILE",
                     .help = "the prompt, read from a file (bytes as they are)"),
        DTX_FLAG_INT("--layer", &a.layer, 0, INT32_MAX, .metavar = "L", .help = "layer, 0-based (default 0)"),
        DTX_FLAG_INT("--head", &a.head, 0, INT32_MAX, .metavar = "H",
                     .help = "head, 0-based (default 0): a DIFF head, or a Transformer head"),
        DTX_FLAG_STR("--json", &a.json, .metavar = "OUT",
                     .help = "where to write the maps (atomically); without it only the summary is printed (a library "
                             "caller gets the JSON)"),
        DTX_FLAG_PRECISION(&a.precision),
    };
    int flags_rc = eval_flags(USAGE, fl, (int)(sizeof fl / sizeof fl[0]), argc, argv);
    if (flags_rc != EVAL_OK) return flags_rc; /* a bad flag, or --help */
    int rc = check_args(&a);
    if (rc != EVAL_OK) return rc;
    dtx_tokenizer *t = NULL;
    dtx_model *m = NULL;
    if (dtx_tokenizer_load(&t, a.tokenizer) != DTX_OK) return eval_lib_error();
    if (eval_model_load(&m, a.model, a.precision) != DTX_OK) rc = eval_lib_error();
    if (rc == EVAL_OK) rc = run(m, t, &a);
    dtx_model_free(m);
    dtx_tokenizer_free(t);
    return rc == EVAL_OK ? EVAL_OK : rc;
}
