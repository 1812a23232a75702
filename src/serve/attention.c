/* The attention explorer's maps (serve.h srv_attention_json): one forward of
 * the prompt, then the library's maps of one head (dtx_model_attention_map:
 * recomputed in double from the forward's q, k and λ). */
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "serve/serve.h"

/* rows [n, n] as an array of arrays, each row only up to its diagonal
 * (the rest is zero by causality), to 5 significant digits */
static cJSON *rows_json(const double *a, int64_t n) {
    cJSON *rows = cJSON_CreateArray();
    for (int64_t i = 0; i < n; i++) {
        cJSON *r = cJSON_CreateArray();
        for (int64_t j = 0; j <= i; j++) {
            char num[32];
            snprintf(num, sizeof num, "%.5g", a[i * n + j]);
            cJSON_AddItemToArray(r, cJSON_CreateRaw(num));
        }
        cJSON_AddItemToArray(rows, r);
    }
    return rows;
}

cJSON *srv_attention_json(dtx_model *m, const dtx_tokenizer *t, const int32_t *ids, int64_t n, int layer, int head,
                          srv_error *e) {
    const dtx_config *c = dtx_model_config(m);
    if (layer >= c->n_layers || head >= c->n_heads) {
        srv_errorf(e, 400, layer >= c->n_layers ? "layer" : "head", "the model has %lld layers of %lld heads; asked for layer %d, head %d",
                   (long long)c->n_layers, (long long)c->n_heads, layer, head);
        return NULL;
    }
    if (n > c->max_seq_len) {
        srv_errorf(e, 400, "prompt", "the prompt is %lld tokens; the model takes at most %lld", (long long)n,
                   (long long)c->max_seq_len);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= c->vocab_size) {
            srv_errorf(e, 400, "prompt", "token id %d is past the model's vocabulary of %lld", ids[i],
                       (long long)c->vocab_size);
            return NULL;
        }
    double *map = malloc(sizeof(double) * (size_t)(n * n));
    if (!map) {
        srv_errorf(e, 500, NULL, "out of memory");
        return NULL;
    }
    if (dtx_model_forward(m, ids, NULL, 1, n, NULL, NULL) != DTX_OK) {
        srv_errorf(e, 500, NULL, "forward: %s", dtx_last_error());
        free(map);
        return NULL;
    }
    cJSON *o = cJSON_CreateObject();
    int diff = c->arch != DTX_ARCH_TRANSFORMER;
    cJSON_AddStringToObject(o, "arch", dtx_arch_name(c->arch));
    cJSON_AddNumberToObject(o, "layers", (double)c->n_layers);
    cJSON_AddNumberToObject(o, "heads", (double)c->n_heads);
    if (c->arch == DTX_ARCH_DIFF) cJSON_AddNumberToObject(o, "lambda", dtx_model_lambda(m, layer));
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens");
    for (int64_t i = 0; i < n; i++) {
        char *s = NULL;
        size_t len = 0;
        int ok = dtx_tokenizer_decode(t, &ids[i], 1, &s, &len) == DTX_OK && s && srv_utf8_valid(s, len);
        char label[32];
        if (!ok) snprintf(label, sizeof label, "<%d>", ids[i]); /* a piece of a character */
        cJSON_AddItemToArray(toks, cJSON_CreateString(ok ? s : label));
        free(s);
    }
    static const char *const names[3] = {"a1", "a2", "combined"};
    static const dtx_attn_map which[3] = {DTX_MAP_FIRST, DTX_MAP_SECOND, DTX_MAP_COMBINED};
    for (int k = 0; k < (diff ? 3 : 1); k++) {
        if (dtx_model_attention_map(m, 0, layer, head, which[k], map) != DTX_OK) {
            srv_errorf(e, 500, NULL, "attention map: %s", dtx_last_error());
            cJSON_Delete(o);
            free(map);
            return NULL;
        }
        cJSON_AddItemToObject(o, names[k], rows_json(map, n));
    }
    free(map);
    return o;
}
