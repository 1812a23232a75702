/* difftx serve (docs/serve.md): an OpenAI-compatible HTTP server over one
 * model, its requests advanced together by continuous batching. Three
 * parts, each a client of include/difftx.h:
 *   request.c  the JSON bodies of the API, parsed and checked (pure: fuzzed);
 *   engine.c   the batcher: slots with a KV cache each, one thread that owns
 *              the model and advances every active slot by one token per
 *              step (dtx_model_decode_batch), requests joining between steps;
 *   http.c     libmicrohttpd: routes, bodies, streaming, errors.
 * The engine's answers equal `difftx generate` for the same prompt, seed and
 * sampling settings, token for token (decode_batch is bit-exact). */
#ifndef DTX_SERVE_H
#define DTX_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "difftx.h"

/* The serve parts' own last error (thread-local, as dtx_last_error): set by
 * srv_fail, which returns NULL for `return srv_fail(...)`. */
void *srv_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *srv_last_error(void);

/* ------------------------------------------------------------- requests */

enum { SRV_MAX_STOP = 4, SRV_MAX_STOP_LEN = 256 };

typedef enum { SRV_COMPLETION, SRV_CHAT, SRV_TOKENIZE, SRV_DETOKENIZE, SRV_ATTENTION } srv_kind;

/* What is wrong with a request: the HTTP status (400, 401, 404, 405, 413,
 * 422, 503...), the OpenAI error type and code, the field it concerns. */
typedef struct {
    int status;
    char message[300];
    char param[64];
    const char *type; /* "invalid_request_error", "authentication_error", "server_error" */
    const char *code; /* NULL, or "context_length_exceeded", ... */
} srv_error;

/* Sets *e and returns 0 (for `return srv_errorf(...)`). */
int srv_errorf(srv_error *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

typedef struct {
    srv_kind kind;
    char *text;          /* completion: the prompt; chat: the rendered conversation; tokenize: the text */
    int32_t *ids;        /* detokenize: the ids */
    int64_t n_ids;
    int64_t max_tokens;  /* -1: not given */
    double temperature;  /* default 1 (OpenAI's) */
    double top_p;        /* default 1 */
    int64_t top_k;       /* a difftx extension (default 0 = off) */
    uint64_t seed;
    int has_seed;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    int stream, include_usage;
    int add_bos;         /* completion: 1 (as difftx generate); tokenize: add_special */
    int layer, head;     /* attention: which map (-1: not given) */
} srv_request;

/* Parses the body [len] of a request of this kind into *r (freed with
 * srv_request_free, also after a failure). 1 when it is valid; 0 with *e
 * saying why (malformed JSON or UTF-8, a field of the wrong type or out of
 * range, an unknown field, a field set to what difftx does not do). */
int srv_request_parse(srv_kind kind, const char *body, size_t len, srv_request *r, srv_error *e);
void srv_request_free(srv_request *r);
/* 1 when s [len] is well-formed UTF-8 (no overlongs, surrogates or code
 * points past U+10FFFF). */
int srv_utf8_valid(const char *s, size_t len);
/* in [n] into out [3n + 1] as UTF-8, NUL-terminated: each maximal start
 * of a character that is not one (a lone byte, a sequence cut short) as
 * one U+FFFD, as browsers' and Python's decoders do (Unicode's "maximal
 * subpart" practice). Returns the bytes written. */
size_t srv_utf8_sanitize(char *out, const char *in, size_t n);
/* The conversation as one prompt (docs/serve.md "Chat"): for each message
 * "<Role>: <content>\n\n", then "Assistant:". */
char *srv_chat_render(const char *const *roles, const char *const *contents, int n);

/* ---------------------------------------------------------------- engine */

typedef struct srv_engine srv_engine;
typedef struct srv_job srv_job;

typedef struct {
    int slots;        /* sequences advanced together (>= 1) */
    int64_t ctx;      /* the most tokens of one sequence, prompt and completion (<= max_seq_len) */
    dtx_kv_type kv;   /* what the slots' KV caches keep (fp32 by default) */
} srv_engine_options;

/* What a generation asks for: the prompt's ids (BOS included when wanted),
 * how many tokens at most, the sampler (its seed starts the job's own
 * generator), text that ends it. */
typedef struct {
    const int32_t *prompt;
    int64_t n_prompt;
    int64_t max_tokens;
    dtx_sampler sampler;
    const char *const *stop;
    int n_stop;
} srv_gen;

/* A job's news, copied out under the engine's lock (srv_job_wait). */
typedef struct {
    char *text;               /* new text since the last call (malloc'd, may be empty; valid UTF-8) */
    size_t len;
    int done;                 /* finished: finish says why */
    const char *finish;       /* "stop", "length", "cancelled", "error" */
    int64_t prompt_tokens, completion_tokens;
    double queued_s, first_token_s; /* time waiting for a slot; from submit to the first token */
    char error[200];
} srv_news;

/* The engine over m and t (which it uses from its own thread only, m
 * exclusively: nothing else may use m while it runs). NULL after
 * srv_fail when the caches do not fit. */
srv_engine *srv_engine_create(dtx_model *m, const dtx_tokenizer *t, const srv_engine_options *o);
/* Stops taking jobs, lets every job in a slot or queued finish, joins the
 * thread, frees everything (outstanding srv_job references stay valid until
 * released). */
void srv_engine_free(srv_engine *e);
/* Queues a generation (everything is copied). NULL after srv_fail (out of
 * memory, or the engine is draining). The caller holds one reference. */
srv_job *srv_engine_submit(srv_engine *e, const srv_gen *g);
/* Waits at most timeout_s (< 0: until there is news) for new text or the
 * end, then fills *n. 1 when there was news, 0 on timeout. */
int srv_job_wait(srv_engine *e, srv_job *j, double timeout_s, srv_news *n);
/* Drops the caller's reference; a job not finished yet is cancelled and
 * its slot freed before the next step. */
void srv_job_release(srv_engine *e, srv_job *j);
/* Runs fn(ctx, m) on the engine's thread between steps (the model's own
 * calls: attention maps, ...), waiting for it; its return value. */
int srv_engine_call(srv_engine *e, int (*fn)(void *ctx, dtx_model *m), void *ctx);
/* Stops admitting new jobs (srv_engine_submit fails from now on). */
void srv_engine_drain(srv_engine *e);

typedef struct {
    int slots, busy, queued;
    int64_t ctx;
    int64_t steps, tokens;  /* batched steps run and tokens they produced */
    int64_t jobs_done;
} srv_stats;
void srv_engine_stats(srv_engine *e, srv_stats *s);

/* ------------------------------------------------------------- attention */

enum { SRV_ATTN_MAX_TOKENS = 256 };

/* The explorer's JSON for one head of one layer of m over ids [n] (a
 * forward of them): the tokens' text, the architecture, λ, and the maps as
 * rows of numbers: DIFF and DIFF2 "a1", "a2" and "combined" (A1 − λ·A2),
 * a Transformer "a1". NULL with *e (400) for a layer or head m lacks. */
struct cJSON;
struct cJSON *srv_attention_json(dtx_model *m, const dtx_tokenizer *t, const int32_t *ids, int64_t n, int layer,
                                 int head, srv_error *e);

/* ------------------------------------------------------------------ http */

typedef struct {
    const char *host;     /* "127.0.0.1" */
    int port;             /* 0: any free port (srv_http_port says which) */
    const char *api_key;  /* NULL: none */
    const char *model_name;
    size_t max_body;      /* bytes */
    int timeout_s;        /* idle connection timeout */
    int max_connections;
    dtx_model *compare;   /* --compare: a second model for the explorer (or NULL) */
    const char *compare_name;
} srv_http_options;

typedef struct srv_http srv_http;
srv_http *srv_http_start(srv_engine *e, const dtx_tokenizer *t, const srv_http_options *o);
int srv_http_port(const srv_http *h);
/* Refuses new connections, waits for the responses in flight, stops. */
void srv_http_stop(srv_http *h);

#endif
