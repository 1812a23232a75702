/* The HTTP side of difftx serve (serve.h) on libmicrohttpd: a thread per
 * connection (so a handler may wait for its generation), bodies collected
 * up to a limit, each route's JSON made with cJSON, errors in OpenAI's
 * format. A generation's response is a content reader that waits for the
 * job's news: server-sent events when streaming, one JSON at the end
 * otherwise. A client that goes away is noticed within 0.1 s (the socket's
 * hang-up, polled while waiting) and its job cancelled, freeing the slot.
 *
 * Why libmicrohttpd: Debian's, maintained by GNU, HTTP/1.1 with chunked
 * responses, connection limits and timeouts done right, a C API without a
 * framework (civetweb would also do; it brings a web server's configuration
 * we do not need). */
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "serve/serve.h"

extern const char srv_explorer_html[];

struct srv_http {
    struct MHD_Daemon *d;
    srv_engine *e;
    const dtx_tokenizer *t;
    srv_http_options o;
    int port;
    pthread_mutex_t mu;
    pthread_cond_t idle;
    int in_flight;
    uint64_t next_id;
};

/* One request's state (MHD's con_cls), from its first call to its end. */
typedef struct {
    srv_http *h;
    char *body;
    size_t len, cap;
    int too_big;
} conn_state;

/* ---------------------------------------------------------------- replies */

/* How long an idle connection stays open, told to the client (the
 * Keep-Alive header), so that it does not send a request on a connection
 * the server is closing. */
static void keep_alive_header(struct MHD_Response *r, int timeout_s) {
    char v[32];
    snprintf(v, sizeof v, "timeout=%d", timeout_s);
    MHD_add_response_header(r, "Keep-Alive", v);
}

static _Thread_local int reply_timeout_s = 30; /* the server's --timeout, for reply()'s header */

static enum MHD_Result reply(struct MHD_Connection *c, int status, const char *type, const char *body, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    keep_alive_header(r, reply_timeout_s);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result reply_json(struct MHD_Connection *c, int status, cJSON *j) {
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s) return reply(c, 500, "application/json", "{\"error\":{\"message\":\"out of memory\"}}", 37);
    enum MHD_Result ok = reply(c, status, "application/json", s, strlen(s));
    free(s);
    return ok;
}

static cJSON *error_json(const srv_error *e) {
    cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_AddStringToObject(err, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0]) cJSON_AddStringToObject(err, "param", e->param);
    else cJSON_AddNullToObject(err, "param");
    if (e->code) cJSON_AddStringToObject(err, "code", e->code);
    else cJSON_AddNullToObject(err, "code");
    return o;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, const srv_error *e) {
    return reply_json(c, e->status, error_json(e));
}

static enum MHD_Result fail(struct MHD_Connection *c, int status, const char *param, const char *fmt, ...) {
    srv_error e;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_errorf(&e, status, param, "%s", msg);
    return reply_error(c, &e);
}

/* While a request waits for its tokens nothing moves on its connection;
 * this restarts the connection's idle timer (a queued request may wait
 * longer than --timeout), so only a client that stops reading times out.
 * libmicrohttpd restarts the timer only when the timeout it replaces is 0,
 * hence two calls. */
static void still_working(const srv_http *h, struct MHD_Connection *c) {
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)h->o.timeout_s);
}

/* 1 when the client has hung up (or the socket is gone). */
static int hung_up(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 1;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* --------------------------------------------------------------- prompts */

/* The request's prompt as ids: its own ids, or its text encoded after the
 * tokenizer's BOS (as difftx generate). 1, or 0 with *e. */
static int prompt_ids(srv_http *h, const srv_request *r, int32_t **ids, int64_t *n, srv_error *e) {
    int64_t m = 0;
    int32_t *enc = NULL;
    if (r->ids) {
        m = r->n_ids;
        enc = malloc(sizeof(int32_t) * (size_t)(m ? m : 1));
        if (!enc) return srv_errorf(e, 500, NULL, "out of memory");
        memcpy(enc, r->ids, sizeof(int32_t) * (size_t)m);
        for (int64_t i = 0; i < m; i++)
            if (enc[i] >= dtx_tokenizer_vocab_size(h->t)) {
                free(enc);
                return srv_errorf(e, 400, "prompt", "token id %d at %lld is out of range for a vocabulary of %lld",
                                  r->ids[i], (long long)i, (long long)dtx_tokenizer_vocab_size(h->t));
            }
        *ids = enc, *n = m;
        return 1;
    }
    if (dtx_tokenizer_encode(h->t, r->text, strlen(r->text), DTX_ENCODE_ORDINARY, &enc, &m) != DTX_OK)
        return srv_errorf(e, 400, "prompt", "cannot encode the prompt: %s", dtx_last_error());
    int32_t bos = r->add_bos ? dtx_tokenizer_bos(h->t) : -1;
    int32_t *out = malloc(sizeof(int32_t) * (size_t)(m + 1));
    if (!out) {
        free(enc);
        return srv_errorf(e, 500, NULL, "out of memory");
    }
    if (bos >= 0) out[0] = bos;
    if (m) memcpy(out + (bos >= 0), enc, sizeof(int32_t) * (size_t)m);
    free(enc);
    *ids = out, *n = m + (bos >= 0);
    return 1;
}

/* ------------------------------------------------------------ generation */

typedef struct {
    srv_http *h;
    srv_job *job;
    struct MHD_Connection *conn;
    srv_kind kind;
    int include_usage, sent_role, finished;
    char id[40];
    long long created;
    char *out; /* bytes waiting to go out */
    size_t out_len, out_off, out_cap;
} gen_reply;

static const char *object_name(srv_kind k, int chunk) {
    return k == SRV_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
}

static cJSON *usage_json(const srv_news *n) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)n->prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)n->completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(n->prompt_tokens + n->completion_tokens));
    return u;
}

/* s [n] (UTF-8) as a JSON string literal, malloc'd: cJSON's strings end at
 * a NUL, and a model may generate one, which the text must keep (\u0000). */
static char *json_literal(const char *s, size_t n) {
    char *o = malloc(6 * n + 3), *p = o;
    if (!o) return NULL;
    *p++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') *p++ = '\\', *p++ = (char)c;
        else if (c == '\n') *p++ = '\\', *p++ = 'n';
        else if (c < 0x20) p += sprintf(p, "\\u%04x", c);
        else *p++ = (char)c;
    }
    *p++ = '"';
    *p = 0;
    return o;
}

static void add_text(cJSON *o, const char *key, const char *text, size_t len) {
    char *lit = json_literal(text, len);
    if (lit) cJSON_AddRawToObject(o, key, lit);
    free(lit);
}

/* The response object (chunk: a streamed piece) with one choice holding
 * text [len] (NULL: none) and finish (NULL: null). */
static cJSON *choice_object(const gen_reply *g, int chunk, const char *text, size_t len, const char *finish,
                            int role) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", g->id);
    cJSON_AddStringToObject(o, "object", object_name(g->kind, chunk));
    cJSON_AddNumberToObject(o, "created", (double)g->created);
    cJSON_AddStringToObject(o, "model", g->h->o.model_name);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (g->kind == SRV_CHAT) {
        cJSON *msg = cJSON_AddObjectToObject(c, chunk ? "delta" : "message");
        if (role || !chunk) cJSON_AddStringToObject(msg, "role", "assistant");
        if (text) add_text(msg, "content", text, len);
    } else {
        add_text(c, "text", text ? text : "", text ? len : 0);
    }
    cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    return o;
}

static int out_add(gen_reply *g, const char *s, size_t n) {
    if (g->out_len + n > g->out_cap) {
        size_t cap = g->out_cap ? g->out_cap : 1024;
        while (g->out_len + n > cap) cap *= 2;
        char *b = realloc(g->out, cap);
        if (!b) return 0;
        g->out = b, g->out_cap = cap;
    }
    memcpy(g->out + g->out_len, s, n);
    g->out_len += n;
    return 1;
}

/* "data: <json>\n\n" (frees j) */
static int out_event(gen_reply *g, cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    int ok = s && out_add(g, "data: ", 6) && out_add(g, s, strlen(s)) && out_add(g, "\n\n", 2);
    free(s);
    return ok;
}

/* What finished a job, as the API says it ("cancelled" never reaches a client). */
static const char *finish_word(const srv_news *n) { return !strcmp(n->finish, "length") ? "length" : "stop"; }

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    gen_reply *g = cls;
    (void)pos;
    for (;;) {
        if (g->out_off < g->out_len) {
            size_t n = g->out_len - g->out_off < max ? g->out_len - g->out_off : max;
            memcpy(buf, g->out + g->out_off, n);
            g->out_off += n;
            return (ssize_t)n;
        }
        if (g->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        g->out_len = g->out_off = 0;
        srv_news n;
        int news = srv_job_wait(g->h->e, g->job, 0.1, &n);
        int ok = 1;
        if (!news) {
            free(n.text);
            if (hung_up(g->conn)) return MHD_CONTENT_READER_END_WITH_ERROR;
            still_working(g->h, g->conn);
            continue;
        }
        if (n.done && !strcmp(n.finish, "error")) {
            srv_error e;
            srv_errorf(&e, 500, NULL, "generation failed: %s", n.error);
            ok = out_event(g, error_json(&e));
        } else {
            if (n.len || (g->kind == SRV_CHAT && !g->sent_role))
                ok = out_event(g, choice_object(g, 1, n.text, n.len, NULL, g->kind == SRV_CHAT && !g->sent_role));
            g->sent_role = 1;
            if (ok && n.done) ok = out_event(g, choice_object(g, 1, g->kind == SRV_CHAT ? NULL : "", 0, finish_word(&n), 0));
            if (ok && n.done && g->include_usage) {
                cJSON *u = cJSON_CreateObject();
                cJSON_AddStringToObject(u, "id", g->id);
                cJSON_AddStringToObject(u, "object", object_name(g->kind, 1));
                cJSON_AddNumberToObject(u, "created", (double)g->created);
                cJSON_AddStringToObject(u, "model", g->h->o.model_name);
                cJSON_AddArrayToObject(u, "choices");
                cJSON_AddItemToObject(u, "usage", usage_json(&n));
                ok = out_event(g, u);
            }
        }
        if (ok && n.done) ok = out_add(g, "data: [DONE]\n\n", 14);
        g->finished = n.done;
        free(n.text);
        if (!ok) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void gen_free(void *cls) {
    gen_reply *g = cls;
    srv_job_release(g->h->e, g->job);
    free(g->out);
    free(g);
}

static enum MHD_Result generate(srv_http *h, struct MHD_Connection *c, srv_kind kind, const conn_state *s) {
    srv_request r;
    srv_error e;
    if (!srv_request_parse(kind, s->body ? s->body : "", s->len, &r, &e)) {
        srv_request_free(&r);
        return reply_error(c, &e);
    }
    int32_t *ids = NULL;
    int64_t n = 0;
    srv_stats st;
    srv_engine_stats(h->e, &st);
    int ok = prompt_ids(h, &r, &ids, &n, &e);
    if (ok && n < 1) ok = srv_errorf(&e, 400, kind == SRV_CHAT ? "messages" : "prompt", "the prompt is empty");
    int64_t max = r.max_tokens;
    if (ok && max < 0) max = kind == SRV_CHAT ? st.ctx - n : 16; /* OpenAI's defaults: to the end; 16 */
    if (ok && (n >= st.ctx || n + max > st.ctx)) {
        ok = srv_errorf(&e, 400, r.max_tokens >= 0 && n < st.ctx ? "max_tokens" : kind == SRV_CHAT ? "messages" : "prompt",
                        "this model's context is %lld tokens; the request asks for %lld (%lld in the prompt, %lld to "
                        "generate)",
                        (long long)st.ctx, (long long)(n + (max > 0 ? max : 1)), (long long)n, (long long)(max > 0 ? max : 1));
        e.code = "context_length_exceeded";
    }
    srv_job *job = NULL;
    if (ok) {
        pthread_mutex_lock(&h->mu);
        uint64_t id = ++h->next_id;
        pthread_mutex_unlock(&h->mu);
        srv_gen g = {.prompt = ids, .n_prompt = n, .max_tokens = max,
                     .sampler = {.temperature = r.temperature, .top_k = r.top_k, .top_p = r.top_p,
                                 .seed = r.has_seed ? r.seed : id * 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL)},
                     .stop = (const char *const *)r.stop, .n_stop = r.n_stop};
        if (!(job = srv_engine_submit(h->e, &g))) ok = srv_errorf(&e, 503, NULL, "%s", srv_last_error());
    }
    free(ids);
    if (!ok) {
        srv_request_free(&r);
        return reply_error(c, &e);
    }
    gen_reply *g = calloc(1, sizeof *g);
    if (!g) {
        srv_job_release(h->e, job);
        srv_request_free(&r);
        return fail(c, 500, NULL, "out of memory");
    }
    g->h = h, g->job = job, g->conn = c, g->kind = kind, g->include_usage = r.include_usage;
    g->created = (long long)time(NULL);
    pthread_mutex_lock(&h->mu);
    snprintf(g->id, sizeof g->id, "%s-%llx", kind == SRV_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)h->next_id);
    pthread_mutex_unlock(&h->mu);
    int stream = r.stream;
    srv_request_free(&r);
    if (stream) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, g, gen_free);
        if (!resp) {
            gen_free(g);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        keep_alive_header(resp, h->o.timeout_s);
        enum MHD_Result res = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return res;
    }
    /* the whole answer, then one JSON; the client's hang-up cancels it */
    char *text = NULL;
    size_t len = 0;
    srv_news nw;
    for (;;) {
        int news = srv_job_wait(h->e, job, 0.1, &nw);
        if (news && nw.len) {
            char *t = realloc(text, len + nw.len + 1);
            if (t) memcpy(t + len, nw.text, nw.len), len += nw.len, t[len] = 0, text = t;
        }
        free(nw.text);
        if (nw.done) break;
        if (!news && hung_up(c)) {
            free(text);
            gen_free(g);
            return MHD_NO;
        }
        if (!news) still_working(h, c);
    }
    enum MHD_Result res;
    if (!strcmp(nw.finish, "error")) {
        res = fail(c, 500, NULL, "generation failed: %s", nw.error);
    } else {
        cJSON *o = choice_object(g, 0, text ? text : "", len, finish_word(&nw), 0);
        cJSON_AddItemToObject(o, "usage", usage_json(&nw));
        res = reply_json(c, 200, o);
    }
    free(text);
    gen_free(g);
    return res;
}

/* -------------------------------------------------------- the other routes */

static enum MHD_Result tokenize(srv_http *h, struct MHD_Connection *c, srv_kind kind, const conn_state *s) {
    srv_request r;
    srv_error e;
    if (!srv_request_parse(kind, s->body ? s->body : "", s->len, &r, &e)) {
        srv_request_free(&r);
        return reply_error(c, &e);
    }
    cJSON *o = cJSON_CreateObject();
    enum MHD_Result res;
    if (kind == SRV_TOKENIZE) {
        int32_t *ids = NULL;
        int64_t n = 0;
        if (!prompt_ids(h, &r, &ids, &n, &e)) {
            cJSON_Delete(o);
            srv_request_free(&r);
            return reply_error(c, &e);
        }
        cJSON *a = cJSON_AddArrayToObject(o, "tokens");
        for (int64_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
        free(ids);
        res = reply_json(c, 200, o);
    } else {
        int64_t V = dtx_tokenizer_vocab_size(h->t);
        for (int64_t i = 0; i < r.n_ids; i++)
            if (r.ids[i] >= V) {
                cJSON_Delete(o);
                res = fail(c, 400, "tokens", "token id %d at %lld is out of range for a vocabulary of %lld", r.ids[i],
                           (long long)i, (long long)V);
                srv_request_free(&r);
                return res;
            }
        char *text = NULL;
        size_t len = 0;
        if (dtx_tokenizer_decode(h->t, r.ids, r.n_ids, &text, &len) != DTX_OK) {
            cJSON_Delete(o);
            srv_request_free(&r);
            return fail(c, 400, "tokens", "%s", dtx_last_error());
        }
        char *clean = malloc(3 * len + 1);
        size_t clen = clean ? srv_utf8_sanitize(clean, text, len) : 0;
        add_text(o, "content", clean ? clean : "", clen);
        free(clean);
        free(text);
        res = reply_json(c, 200, o);
    }
    srv_request_free(&r);
    return res;
}

static enum MHD_Result health(srv_http *h, struct MHD_Connection *c) {
    srv_stats st;
    srv_engine_stats(h->e, &st);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    cJSON_AddNumberToObject(o, "slots", st.slots);
    cJSON_AddNumberToObject(o, "slots_busy", st.busy);
    cJSON_AddNumberToObject(o, "queued", st.queued);
    cJSON_AddNumberToObject(o, "ctx", (double)st.ctx);
    cJSON_AddNumberToObject(o, "batched_steps", (double)st.steps);
    cJSON_AddNumberToObject(o, "batched_tokens", (double)st.tokens);
    cJSON_AddNumberToObject(o, "requests_done", (double)st.jobs_done);
    return reply_json(c, 200, o);
}

static enum MHD_Result models(srv_http *h, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject(), *a;
    cJSON_AddStringToObject(o, "object", "list");
    a = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; i < 2; i++) {
        const char *name = i ? h->o.compare_name : h->o.model_name;
        if (!name || (i && !h->o.compare)) continue;
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "id", name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "difftx");
        cJSON_AddItemToArray(a, m);
    }
    return reply_json(c, 200, o);
}

/* Bearer key equal to the server's, in time that does not depend on where they differ. */
static int authorized(const srv_http *h, struct MHD_Connection *c) {
    if (!h->o.api_key) return 1;
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!v || strncmp(v, "Bearer ", 7) != 0) return 0;
    const char *given = v + 7, *key = h->o.api_key;
    size_t gl = strlen(given), kl = strlen(key);
    unsigned diff = (unsigned)(gl ^ kl);
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < gl ? given[i] : 0);
    return diff == 0;
}

/* The explorer's maps: the served model's on the engine's thread, the
 * --compare model's under its own lock. */
typedef struct {
    const dtx_tokenizer *t;
    const int32_t *ids;
    int64_t n;
    int layer, head;
    cJSON *out;
    srv_error *e;
} attn_call;

static int attn_on_model(void *ctx, dtx_model *m) {
    attn_call *a = ctx;
    a->out = srv_attention_json(m, a->t, a->ids, a->n, a->layer, a->head, a->e);
    return a->out != NULL;
}

static pthread_mutex_t compare_mu = PTHREAD_MUTEX_INITIALIZER;

static enum MHD_Result attention(srv_http *h, struct MHD_Connection *c, const conn_state *s) {
    srv_request r;
    srv_error e;
    if (!srv_request_parse(SRV_ATTENTION, s->body ? s->body : "", s->len, &r, &e)) {
        srv_request_free(&r);
        return reply_error(c, &e);
    }
    int32_t *ids = NULL;
    int64_t n = 0;
    int ok = prompt_ids(h, &r, &ids, &n, &e);
    if (ok && (n < 1 || n > SRV_ATTN_MAX_TOKENS))
        ok = srv_errorf(&e, 400, "prompt", "the explorer takes 1 to %d tokens; this prompt is %lld", SRV_ATTN_MAX_TOKENS,
                        (long long)n);
    attn_call a = {.t = h->t, .ids = ids, .n = n, .layer = r.layer, .head = r.head, .e = &e};
    cJSON *o = NULL;
    if (ok && srv_engine_call(h->e, attn_on_model, &a)) {
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(a.out, "model", h->o.model_name);
        cJSON_AddItemToObject(o, "model", a.out);
        if (h->o.compare) {
            pthread_mutex_lock(&compare_mu);
            a.out = NULL;
            attn_on_model(&a, h->o.compare);
            pthread_mutex_unlock(&compare_mu);
            if (a.out) {
                cJSON_AddStringToObject(a.out, "model", h->o.compare_name);
                cJSON_AddItemToObject(o, "compare", a.out);
            } else { /* its own shape may lack the layer or head: say so beside the first */
                cJSON_AddStringToObject(o, "compare_error", e.message);
            }
        }
    } else if (ok) {
        ok = 0;
    }
    free(ids);
    srv_request_free(&r);
    return ok ? reply_json(c, 200, o) : reply_error(c, &e);
}

static enum MHD_Result route(srv_http *h, struct MHD_Connection *c, const char *url, const char *method,
                             const conn_state *s) {
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    static const struct {
        const char *path;
        int post;
    } routes[] = {{"/", 0}, {"/health", 0}, {"/v1/models", 0}, {"/v1/completions", 1}, {"/v1/chat/completions", 1},
                  {"/tokenize", 1}, {"/detokenize", 1}, {"/v1/attention", 1}};
    int i = 0, n = (int)(sizeof routes / sizeof *routes);
    while (i < n && strcmp(url, routes[i].path) != 0) i++;
    if (i == n) return fail(c, 404, NULL, "no route %s %s", method, url);
    if (routes[i].post ? !post : !get)
        return fail(c, 405, NULL, "%s takes %s, not %s", url, routes[i].post ? "POST" : "GET", method);
    if (i >= 2 && !authorized(h, c)) return fail(c, 401, NULL, "a valid API key is needed (Authorization: Bearer KEY)");
    switch (i) {
    case 0: return reply(c, 200, "text/html; charset=utf-8", srv_explorer_html, strlen(srv_explorer_html));
    case 1: return health(h, c);
    case 2: return models(h, c);
    case 3: return generate(h, c, SRV_COMPLETION, s);
    case 4: return generate(h, c, SRV_CHAT, s);
    case 5: return tokenize(h, c, SRV_TOKENIZE, s);
    case 6: return tokenize(h, c, SRV_DETOKENIZE, s);
    default: return attention(h, c, s);
    }
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv_http *h = cls;
    conn_state *s = *con_cls;
    (void)version;
    reply_timeout_s = h->o.timeout_s;
    if (!s) { /* the first call: headers only */
        if (!(s = calloc(1, sizeof *s))) return MHD_NO;
        s->h = h;
        *con_cls = s;
        pthread_mutex_lock(&h->mu);
        h->in_flight++;
        pthread_mutex_unlock(&h->mu);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > h->o.max_body) s->too_big = 1;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!s->too_big && s->len + *upload_size <= h->o.max_body) {
            if (s->len + *upload_size + 1 > s->cap) {
                size_t cap = s->cap ? s->cap : 4096;
                while (s->len + *upload_size + 1 > cap) cap *= 2;
                char *b = realloc(s->body, cap);
                if (!b) return MHD_NO;
                s->body = b, s->cap = cap;
            }
            memcpy(s->body + s->len, upload, *upload_size);
            s->len += *upload_size;
            s->body[s->len] = 0;
        } else {
            s->too_big = 1;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (s->too_big)
        return fail(c, 413, NULL, "the request body is larger than the server's limit of %zu bytes", h->o.max_body);
    return route(h, c, url, method, s);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why) {
    srv_http *h = cls;
    conn_state *s = *con_cls;
    (void)c, (void)why;
    if (!s) return;
    free(s->body);
    free(s);
    *con_cls = NULL;
    pthread_mutex_lock(&h->mu);
    if (--h->in_flight == 0) pthread_cond_broadcast(&h->idle);
    pthread_mutex_unlock(&h->mu);
}

srv_http *srv_http_start(srv_engine *e, const dtx_tokenizer *t, const srv_http_options *o) {
    srv_http *h = calloc(1, sizeof *h);
    if (!h) return srv_fail("out of memory");
    h->e = e, h->t = t, h->o = *o;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->idle, NULL);
    struct sockaddr_in6 a6 = {0};
    struct sockaddr_in a4 = {0};
    struct sockaddr *addr;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_POLL;
    if (inet_pton(AF_INET, o->host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET, a4.sin_port = htons((uint16_t)o->port);
        addr = (struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, o->host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6, a6.sin6_port = htons((uint16_t)o->port);
        addr = (struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        free(h);
        return srv_fail("serve: --host %s is not an IPv4 or IPv6 address", o->host);
    }
    h->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, handle, h, MHD_OPTION_SOCK_ADDR, addr,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, h, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)o->timeout_s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections,
                            MHD_OPTION_END);
    if (!h->d) {
        free(h);
        return srv_fail("serve: cannot listen on %s port %d (in use, or not allowed)", o->host, o->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : o->port;
    return h;
}

int srv_http_port(const srv_http *h) { return h->port; }

void srv_http_stop(srv_http *h) {
    if (!h) return;
    MHD_socket ls = MHD_quiesce_daemon(h->d); /* no new connections; the listening socket is ours to close */
    srv_engine_drain(h->e);
    pthread_mutex_lock(&h->mu);
    while (h->in_flight > 0) pthread_cond_wait(&h->idle, &h->mu);
    pthread_mutex_unlock(&h->mu);
    MHD_stop_daemon(h->d);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->idle);
    free(h);
}
