/* The API's request bodies (serve.h): JSON (cJSON) into srv_request, every
 * field checked. Unknown fields are refused (a typo must not be silently
 * ignored), as are fields set to what difftx does not do (n > 1, penalties,
 * tools...); fields that change nothing (user, an explicit null) pass. The
 * body must be UTF-8: cJSON passes bytes through, so it is checked first. */
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "serve/serve.h"

int srv_errorf(srv_error *e, int status, const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = status == 401 ? "authentication_error" : status >= 500 ? "server_error" : "invalid_request_error";
    e->code = NULL;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return 0;
}

static _Thread_local char last_error[400];

void *srv_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return NULL;
}

const char *srv_last_error(void) { return last_error; }

int srv_utf8_valid(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < len;) {
        unsigned c = s[i];
        size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!n || i + n > len) return 0;
        for (size_t k = 1; k < n; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        if (n == 3 && c == 0xE0 && s[i + 1] < 0xA0) return 0; /* overlong */
        if (n == 3 && c == 0xED && s[i + 1] >= 0xA0) return 0; /* a surrogate */
        if (n == 4 && c == 0xF0 && s[i + 1] < 0x90) return 0; /* overlong */
        if (n == 4 && c == 0xF4 && s[i + 1] >= 0x90) return 0; /* past U+10FFFF */
        i += n;
    }
    return 1;
}

size_t srv_utf8_sanitize(char *out, const char *in, size_t n) {
    const unsigned char *s = (const unsigned char *)in;
    size_t o = 0, i = 0;
    while (i < n) {
        unsigned c = s[i], lo = 0x80, hi = 0xBF;
        size_t need = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (c == 0xE0) lo = 0xA0; /* the second byte's range excludes overlongs, surrogates, past U+10FFFF */
        if (c == 0xED) hi = 0x9F;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
        size_t k = need ? 1 : 0;
        while (k && k < need && i + k < n && s[i + k] >= (k == 1 ? lo : 0x80) && s[i + k] <= (k == 1 ? hi : 0xBF)) k++;
        if (need && k == need) {
            memcpy(out + o, s + i, need);
            o += need, i += need;
        } else { /* one U+FFFD for the longest start of a character that does not finish */
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3, i += k ? k : 1;
        }
    }
    out[o] = 0;
    return o;
}

void srv_request_free(srv_request *r) {
    free(r->text);
    free(r->ids);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

char *srv_chat_render(const char *const *roles, const char *const *contents, int n) {
    size_t need = 16;
    for (int i = 0; i < n; i++) need += strlen(roles[i]) + strlen(contents[i]) + 8;
    char *o = malloc(need), *p = o;
    if (!o) return NULL;
    for (int i = 0; i < n; i++) {
        size_t rl = strlen(roles[i]), cl = strlen(contents[i]);
        *p++ = (char)(roles[i][0] >= 'a' && roles[i][0] <= 'z' ? roles[i][0] - 32 : roles[i][0]);
        memcpy(p, roles[i] + 1, rl - 1), p += rl - 1;
        memcpy(p, ": ", 2), p += 2;
        memcpy(p, contents[i], cl), p += cl;
        memcpy(p, "\n\n", 2), p += 2;
    }
    memcpy(p, "Assistant:", 11);
    return o;
}

/* ---- field checks: each returns 1, or 0 after srv_errorf */

static const char *type_name(const cJSON *v) {
    return cJSON_IsNull(v) ? "null" : cJSON_IsBool(v) ? "a boolean" : cJSON_IsNumber(v) ? "a number" :
           cJSON_IsString(v) ? "a string" : cJSON_IsArray(v) ? "an array" : "an object";
}

static int get_number(const cJSON *v, const char *name, double lo, double hi, double *out, srv_error *e) {
    if (cJSON_IsNull(v)) return 1; /* keep the default */
    if (!cJSON_IsNumber(v)) return srv_errorf(e, 400, name, "'%s' must be a number, not %s", name, type_name(v));
    double x = v->valuedouble;
    if (!(x >= lo && x <= hi)) return srv_errorf(e, 400, name, "'%s' is %g; it must be in [%g, %g]", name, x, lo, hi);
    *out = x;
    return 1;
}

static int get_int(const cJSON *v, const char *name, double lo, double hi, int64_t *out, srv_error *e) {
    double x = (double)*out;
    if (!get_number(v, name, lo, hi, &x, e)) return 0;
    if (x != floor(x)) return srv_errorf(e, 400, name, "'%s' is %g; it must be an integer", name, x);
    *out = (int64_t)x;
    return 1;
}

static int get_bool(const cJSON *v, const char *name, int *out, srv_error *e) {
    if (cJSON_IsNull(v)) return 1;
    if (!cJSON_IsBool(v)) return srv_errorf(e, 400, name, "'%s' must be true or false, not %s", name, type_name(v));
    *out = cJSON_IsTrue(v);
    return 1;
}

/* A field that difftx takes only at its neutral value (null, or the value
 * neutral describes). */
static int neutral_only(const cJSON *v, const char *name, srv_error *e) {
    int ok = cJSON_IsNull(v) || (cJSON_IsFalse(v)) ||
             (cJSON_IsNumber(v) && (v->valuedouble == 0 || (!strcmp(name, "n") && v->valuedouble == 1) ||
                                    (!strcmp(name, "best_of") && v->valuedouble == 1))) ||
             (cJSON_IsObject(v) && !v->child && !strcmp(name, "logit_bias")) ||
             (cJSON_IsString(v) && !strcmp(name, "tool_choice") && !strcmp(v->valuestring, "none")) ||
             (cJSON_IsArray(v) && !v->child && !strcmp(name, "tools"));
    if (cJSON_IsObject(v) && !strcmp(name, "response_format")) { /* {"type": "text"} only */
        const cJSON *t = v->child;
        ok = t && !t->next && !strcmp(t->string, "type") && cJSON_IsString(t) && !strcmp(t->valuestring, "text");
    }
    if (cJSON_IsBool(v) && !strcmp(name, "parallel_tool_calls")) ok = 1; /* no tools: either says nothing */
    if (!ok) return srv_errorf(e, 400, name, "'%s' is not supported by difftx serve except at its default", name);
    return 1;
}

static int get_stop(const cJSON *v, srv_request *r, srv_error *e) {
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]); /* a repeated key: the last one counts */
    r->n_stop = 0;
    if (cJSON_IsNull(v)) return 1;
    const cJSON *one = v;
    if (cJSON_IsArray(v)) {
        if (cJSON_GetArraySize(v) > SRV_MAX_STOP)
            return srv_errorf(e, 400, "stop", "'stop' has %d strings; at most %d", cJSON_GetArraySize(v), SRV_MAX_STOP);
        one = v->child;
    } else if (!cJSON_IsString(v)) {
        return srv_errorf(e, 400, "stop", "'stop' must be a string or an array of strings, not %s", type_name(v));
    }
    for (; one; one = cJSON_IsArray(v) ? one->next : NULL) {
        if (!cJSON_IsString(one))
            return srv_errorf(e, 400, "stop", "'stop' must hold strings, not %s", type_name(one));
        if (strlen(one->valuestring) > SRV_MAX_STOP_LEN)
            return srv_errorf(e, 400, "stop", "a stop string is %zu bytes; at most %d", strlen(one->valuestring),
                              SRV_MAX_STOP_LEN);
        if (!(r->stop[r->n_stop++] = strdup(one->valuestring))) return srv_errorf(e, 500, NULL, "out of memory");
    }
    return 1;
}

static int get_stream_options(const cJSON *v, srv_request *r, srv_error *e) {
    if (cJSON_IsNull(v)) return 1;
    if (!cJSON_IsObject(v))
        return srv_errorf(e, 400, "stream_options", "'stream_options' must be an object, not %s", type_name(v));
    for (const cJSON *f = v->child; f; f = f->next) {
        if (strcmp(f->string, "include_usage") != 0)
            return srv_errorf(e, 400, "stream_options", "unknown field 'stream_options.%s'", f->string);
        if (!get_bool(f, "stream_options.include_usage", &r->include_usage, e)) return 0;
    }
    return 1;
}

/* The prompt: a string, an array of one string, or an array of token ids. */
static int get_prompt(const cJSON *v, srv_request *r, srv_error *e) {
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(v->child)) v = v->child;
    if (cJSON_IsString(v)) {
        if (!(r->text = strdup(v->valuestring))) return srv_errorf(e, 500, NULL, "out of memory");
        return 1;
    }
    if (!cJSON_IsArray(v) || !v->child)
        return srv_errorf(e, 400, "prompt", "'prompt' must be a string, an array of one string or of token ids");
    int n = cJSON_GetArraySize(v);
    if (!(r->ids = malloc(sizeof(int32_t) * (size_t)n))) return srv_errorf(e, 500, NULL, "out of memory");
    for (const cJSON *t = v->child; t; t = t->next) {
        int64_t id = -1;
        if (!cJSON_IsNumber(t) || !get_int(t, "prompt", 0, INT32_MAX, &id, e))
            return srv_errorf(e, 400, "prompt", "'prompt' element %lld must be a token id (an integer >= 0)",
                              (long long)r->n_ids);
        r->ids[r->n_ids++] = (int32_t)id;
    }
    return 1;
}

static int get_messages(const cJSON *v, srv_request *r, srv_error *e) {
    if (!cJSON_IsArray(v) || !v->child)
        return srv_errorf(e, 400, "messages", "'messages' must be a non-empty array of messages");
    int n = cJSON_GetArraySize(v), i = 0, ok = 1;
    const char **roles = calloc((size_t)n, sizeof *roles);
    char **contents = calloc((size_t)n, sizeof *contents);
    if (!roles || !contents) ok = srv_errorf(e, 500, NULL, "out of memory");
    for (const cJSON *msg = v->child; ok && msg; msg = msg->next, i++) {
        if (!cJSON_IsObject(msg)) {
            ok = srv_errorf(e, 400, "messages", "messages[%d] must be an object, not %s", i, type_name(msg));
            break;
        }
        const cJSON *role = NULL, *content = NULL;
        for (const cJSON *f = msg->child; ok && f; f = f->next) {
            if (!strcmp(f->string, "role")) role = f;
            else if (!strcmp(f->string, "content")) content = f;
            else if (strcmp(f->string, "name") != 0)
                ok = srv_errorf(e, 400, "messages", "messages[%d]: unknown field '%s'", i, f->string);
        }
        if (!ok) break;
        static const char *const known[] = {"system", "developer", "user", "assistant"};
        int k = 0;
        while (cJSON_IsString(role) && k < 4 && strcmp(role->valuestring, known[k]) != 0) k++;
        if (!cJSON_IsString(role) || k == 4) {
            ok = srv_errorf(e, 400, "messages", "messages[%d].role must be system, developer, user or assistant", i);
            break;
        }
        roles[i] = known[k == 1 ? 0 : k]; /* a developer message is a system message */
        if (cJSON_IsString(content)) {
            contents[i] = strdup(content->valuestring);
        } else if (cJSON_IsArray(content)) { /* parts: text only, joined */
            size_t need = 1;
            for (const cJSON *p = content->child; ok && p; p = p->next) {
                const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type"), *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
                if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(tx))
                    ok = srv_errorf(e, 400, "messages", "messages[%d].content: only parts of type \"text\"", i);
                else
                    need += strlen(tx->valuestring);
            }
            if (ok && (contents[i] = malloc(need))) {
                contents[i][0] = 0;
                for (const cJSON *p = content->child; p; p = p->next)
                    strcat(contents[i], cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring);
            }
        } else {
            ok = srv_errorf(e, 400, "messages", "messages[%d].content must be a string or an array of text parts", i);
        }
        if (ok && !contents[i]) ok = srv_errorf(e, 500, NULL, "out of memory");
    }
    if (ok && !(r->text = srv_chat_render(roles, (const char *const *)contents, n)))
        ok = srv_errorf(e, 500, NULL, "out of memory");
    for (int k = 0; contents && k < n; k++) free(contents[k]);
    free(contents);
    free(roles);
    return ok;
}

/* One field of a generation request (completion or chat). 1 when taken. */
static int generation_field(const cJSON *f, srv_kind kind, srv_request *r, srv_error *e) {
    const char *k = f->string;
    if (!strcmp(k, "model") || !strcmp(k, "user")) {
        if (!cJSON_IsString(f) && !cJSON_IsNull(f)) return srv_errorf(e, 400, k, "'%s' must be a string", k);
        return 1;
    }
    if (!strcmp(k, "max_tokens") || (kind == SRV_CHAT && !strcmp(k, "max_completion_tokens")))
        return get_int(f, k, 1, 1 << 24, &r->max_tokens, e);
    if (!strcmp(k, "temperature")) return get_number(f, k, 0, 2, &r->temperature, e);
    if (!strcmp(k, "top_p")) {
        if (!get_number(f, k, 0, 1, &r->top_p, e)) return 0;
        if (!(r->top_p > 0)) return srv_errorf(e, 400, k, "'top_p' must be above 0");
        return 1;
    }
    if (!strcmp(k, "top_k")) return get_int(f, k, 0, INT32_MAX, &r->top_k, e);
    if (!strcmp(k, "seed")) {
        int64_t s = 0;
        if (cJSON_IsNull(f)) return 1;
        if (!get_int(f, k, -9007199254740992.0, 9007199254740992.0, &s, e)) return 0;
        r->seed = (uint64_t)s, r->has_seed = 1;
        return 1;
    }
    if (!strcmp(k, "stream")) return get_bool(f, k, &r->stream, e);
    if (!strcmp(k, "stream_options")) return get_stream_options(f, r, e);
    if (!strcmp(k, "stop")) return get_stop(f, r, e);
    static const char *const neutral[] = {"n", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs",
                                          "best_of", "echo", "suffix", "top_logprobs", "tools", "tool_choice",
                                          "parallel_tool_calls", "response_format", "functions", "function_call"};
    for (size_t i = 0; i < sizeof neutral / sizeof *neutral; i++)
        if (!strcmp(k, neutral[i])) return neutral_only(f, k, e);
    return srv_errorf(e, 400, k, "unknown field '%s'", k);
}

int srv_request_parse(srv_kind kind, const char *body, size_t len, srv_request *r, srv_error *e) {
    memset(r, 0, sizeof *r);
    r->kind = kind, r->max_tokens = -1, r->temperature = 1, r->top_p = 1, r->layer = r->head = -1;
    r->add_bos = kind != SRV_TOKENIZE; /* /tokenize adds no BOS unless add_special (llama.cpp's default) */
    if (!srv_utf8_valid(body, len)) return srv_errorf(e, 400, NULL, "the request body is not UTF-8");
    if (memchr(body, 0, len)) return srv_errorf(e, 400, NULL, "the request body holds a NUL byte");
    /* a string with an escaped NUL would reach us cut short (cJSON's strings end there) */
    for (const char *p = body; (p = memmem(p, len - (size_t)(p - body), "\\u0000", 6)); p++) {
        size_t slashes = 0; /* an escape only after an even run of backslashes before it */
        while (p - (ptrdiff_t)slashes > body && p[-1 - (ptrdiff_t)slashes] == '\\') slashes++;
        if (slashes % 2 == 0)
            return srv_errorf(e, 400, NULL, "a string in the request holds \\u0000 (NUL), which difftx serve does not take");
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!j) {
        size_t at = end && end >= body ? (size_t)(end - body) : 0;
        return srv_errorf(e, 400, NULL, "the request body is not JSON (at byte %zu)", at);
    }
    int ok = 1;
    if (!cJSON_IsObject(j)) ok = srv_errorf(e, 400, NULL, "the request body must be a JSON object");
    const cJSON *prompt = NULL, *messages = NULL, *content = NULL, *tokens = NULL;
    for (const cJSON *f = ok ? j->child : NULL; ok && f; f = f->next) {
        const char *k = f->string;
        if (kind == SRV_COMPLETION && !strcmp(k, "prompt")) prompt = f;
        else if (kind == SRV_CHAT && !strcmp(k, "messages")) messages = f;
        else if (kind == SRV_COMPLETION || kind == SRV_CHAT) ok = generation_field(f, kind, r, e);
        else if ((kind == SRV_TOKENIZE || kind == SRV_ATTENTION) && (!strcmp(k, "content") || !strcmp(k, "prompt")))
            content = f;
        else if (kind == SRV_TOKENIZE && (!strcmp(k, "add_special") || !strcmp(k, "with_pieces")))
            ok = !strcmp(k, "add_special") ? get_bool(f, k, &r->add_bos, e) : neutral_only(f, k, e);
        else if (kind == SRV_ATTENTION && !strcmp(k, "add_bos")) ok = get_bool(f, k, &r->add_bos, e);
        else if (kind == SRV_ATTENTION && (!strcmp(k, "layer") || !strcmp(k, "head"))) {
            int64_t v = -1;
            ok = get_int(f, k, 0, 1 << 20, &v, e);
            *(!strcmp(k, "layer") ? &r->layer : &r->head) = (int)v;
        } else if (kind == SRV_ATTENTION && !strcmp(k, "model")) ok = cJSON_IsString(f) || srv_errorf(e, 400, k, "'model' must be a string");
        else if (kind == SRV_DETOKENIZE && !strcmp(k, "tokens")) tokens = f;
        else ok = srv_errorf(e, 400, k, "unknown field '%s'", k);
    }
    if (ok && kind == SRV_COMPLETION)
        ok = prompt ? get_prompt(prompt, r, e) : srv_errorf(e, 400, "prompt", "'prompt' is required");
    if (ok && kind == SRV_CHAT)
        ok = messages ? get_messages(messages, r, e) : srv_errorf(e, 400, "messages", "'messages' is required");
    if (ok && (kind == SRV_TOKENIZE || kind == SRV_ATTENTION)) {
        if (!cJSON_IsString(content))
            ok = srv_errorf(e, 400, "content", "'%s' (a string) is required", kind == SRV_TOKENIZE ? "content" : "prompt");
        else if (!(r->text = strdup(content->valuestring)))
            ok = srv_errorf(e, 500, NULL, "out of memory");
    }
    if (ok && kind == SRV_DETOKENIZE) {
        if (!cJSON_IsArray(tokens)) ok = srv_errorf(e, 400, "tokens", "'tokens' (an array of token ids) is required");
        int n = ok ? cJSON_GetArraySize(tokens) : 0;
        if (ok && !(r->ids = malloc(sizeof(int32_t) * (size_t)(n ? n : 1)))) ok = srv_errorf(e, 500, NULL, "out of memory");
        for (const cJSON *t = ok ? tokens->child : NULL; ok && t; t = t->next) {
            int64_t id = -1;
            if (!cJSON_IsNumber(t) || !get_int(t, "tokens", 0, INT32_MAX, &id, e))
                ok = srv_errorf(e, 400, "tokens", "'tokens' element %lld must be a token id (an integer >= 0)",
                                (long long)r->n_ids);
            else
                r->ids[r->n_ids++] = (int32_t)id;
        }
    }
    if (ok && kind == SRV_ATTENTION && (r->layer < 0 || r->head < 0))
        ok = srv_errorf(e, 400, r->layer < 0 ? "layer" : "head", "'layer' and 'head' (integers >= 0) are required");
    cJSON_Delete(j);
    return ok;
}
