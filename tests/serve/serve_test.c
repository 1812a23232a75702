/* difftx serve's parts without HTTP (src/serve/): request parsing (every
 * field, every refusal, as a table), UTF-8 checks, the chat template, and
 * the batcher: many jobs at once over a few slots give, each, exactly the
 * tokens of generating alone (the prefill, sampling and decode loop of
 * difftx generate), cancelled jobs free their slots, a draining engine
 * refuses new jobs and finishes the ones it has. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../test.h"
#include "serve/serve.h"

/* ------------------------------------------------------------ requests */

typedef struct {
    srv_kind kind;
    const char *body;
    int status;        /* 0: valid */
    const char *says;  /* in the message (errors), or NULL */
} parse_case;

static const parse_case CASES[] = {
    {SRV_COMPLETION, "{\"prompt\":\"hi\"}", 0, NULL},
    {SRV_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"hi\"],\"max_tokens\":5,\"temperature\":0,\"top_p\":0.5,\"seed\":7,"
                     "\"stop\":[\"a\",\"b\"],\"stream\":true,\"stream_options\":{\"include_usage\":true},\"n\":1,"
                     "\"logprobs\":null,\"presence_penalty\":0,\"user\":\"u\",\"echo\":false}", 0, NULL},
    {SRV_COMPLETION, "{\"prompt\":[1,2,3]}", 0, NULL},
    {SRV_COMPLETION, "{}", 400, "'prompt' is required"},
    {SRV_COMPLETION, "{\"prompt\":\"hi\",\"bogus\":1}", 400, "unknown field 'bogus'"},
    {SRV_COMPLETION, "{\"prompt\":\"hi\",\"n\":2}", 400, "'n' is not supported"},
    {SRV_COMPLETION, "{\"prompt\":\"hi\",\"frequency_penalty\":0.5}", 400, "not supported"},
    {SRV_COMPLETION, "{\"prompt\":\"hi\",\"temperature\":3}", 400, "must be in [0, 2]"},
    {SRV_COMPLETION, "{\"prompt\":\"hi\",\"temperature\":\"hot\"}", 400, "must be a number"},
    {SRV_COMPLETION, "{\"prompt\":\"hi\",\"top_p\":0}", 400, "above 0"},
    {SRV_COMPLETION, "{\"prompt\":\"hi\",\"max_tokens\":0}", 400, "max_tokens"},
    {SRV_COMPLETION, "{\"prompt\":\"hi\",\"max_tokens\":2.5}", 400, "integer"},
    {SRV_COMPLETION, "{\"prompt\":\"hi\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400, "at most 4"},
    {SRV_COMPLETION, "{\"prompt\":\"hi\",\"stop\":[1]}", 400, "must hold strings"},
    {SRV_COMPLETION, "{\"prompt\":\"hi\",\"stop\":[\"a\",\"b\",\"c\"],\"stop\":[\"d\",\"e\",\"f\"]}", 0, NULL},
    {SRV_COMPLETION, "{\"prompt\":\"hi\",\"stream\":1}", 400, "true or false"},
    {SRV_COMPLETION, "{\"prompt\":\"hi\",\"stream_options\":{\"x\":1}}", 400, "stream_options.x"},
    {SRV_COMPLETION, "{\"prompt\":[1,-2]}", 400, "token id"},
    {SRV_COMPLETION, "{\"prompt\":{}}", 400, "'prompt' must be"},
    {SRV_COMPLETION, "[1,2]", 400, "must be a JSON object"},
    {SRV_COMPLETION, "{\"prompt\":", 400, "not JSON"},
    {SRV_COMPLETION, "{\"prompt\":\"\xC3\x28\"}", 400, "not UTF-8"},
    {SRV_COMPLETION, "{\"prompt\":\"\xED\xA0\x80\"}", 400, "not UTF-8"}, /* an encoded surrogate */
    {SRV_COMPLETION, "{\"prompt\":\"\\ud800\"}", 400, "not JSON"},          /* a lone escaped surrogate */
    {SRV_COMPLETION, "{\"prompt\":\"a\\u0000b\"}", 400, "NUL"},              /* would be cut at the NUL */
    {SRV_COMPLETION, "{\"prompt\":\"a\\\\u0000b\"}", 0, NULL},                /* a backslash, then text */
    {SRV_CHAT, "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":"
               "[{\"type\":\"text\",\"text\":\"hi\"}]}],\"max_completion_tokens\":3}", 0, NULL},
    {SRV_CHAT, "{\"messages\":[]}", 400, "non-empty array"},
    {SRV_CHAT, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", 400, "role must be"},
    {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"mood\":1}]}", 400, "unknown field 'mood'"},
    {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400, "type \"text\""},
    {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}", 400, "not supported"},
    {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"text\"}}", 0, NULL},
    {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}",
     400, "not supported"},
    {SRV_TOKENIZE, "{\"content\":\"hi\",\"add_special\":true}", 0, NULL},
    {SRV_TOKENIZE, "{\"content\":3}", 400, "required"},
    {SRV_DETOKENIZE, "{\"tokens\":[1,2]}", 0, NULL},
    {SRV_DETOKENIZE, "{\"tokens\":[1,\"x\"]}", 400, "element 1"},
    {SRV_ATTENTION, "{\"prompt\":\"hi\",\"layer\":0,\"head\":1}", 0, NULL},
    {SRV_ATTENTION, "{\"prompt\":\"hi\",\"layer\":0}", 400, "required"},
};

TEST(serve_request_parsing_table) {
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        const parse_case *c = &CASES[i];
        srv_request r;
        srv_error e = {0};
        int ok = srv_request_parse(c->kind, c->body, strlen(c->body), &r, &e);
        if (c->status == 0) {
            CHECKF(ok, "case %zu (%s): refused: %s", i, c->body, e.message);
        } else {
            CHECKF(!ok && e.status == c->status, "case %zu (%s): %s, status %d", i, c->body, ok ? "accepted" : "refused",
                   e.status);
            CHECKF(!ok && strstr(e.message, c->says), "case %zu: message '%s' lacks '%s'", i, e.message, c->says);
        }
        srv_request_free(&r);
    }
}

TEST(serve_request_fields_land) {
    srv_request r;
    srv_error e;
    const char *b = CASES[1].body;
    REQUIRE(srv_request_parse(SRV_COMPLETION, b, strlen(b), &r, &e));
    CHECK(!strcmp(r.text, "hi") && r.max_tokens == 5 && r.temperature == 0 && r.top_p == 0.5);
    CHECK(r.has_seed && r.seed == 7 && r.n_stop == 2 && !strcmp(r.stop[1], "b") && r.stream && r.include_usage);
    srv_request_free(&r);
    REQUIRE(srv_request_parse(SRV_COMPLETION, "{\"prompt\":\"x\"}", 14, &r, &e));
    CHECK(r.max_tokens == -1 && r.temperature == 1 && r.top_p == 1 && !r.has_seed && !r.stream && r.add_bos);
    srv_request_free(&r);
    b = CASES[26].body;
    REQUIRE(srv_request_parse(SRV_CHAT, b, strlen(b), &r, &e));
    CHECKF(!strcmp(r.text, "System: be brief\n\nUser: hi\n\nAssistant:"), "%s", r.text);
    CHECK(r.max_tokens == 3);
    srv_request_free(&r);
    REQUIRE(srv_request_parse(SRV_TOKENIZE, "{\"content\":\"x\"}", 15, &r, &e));
    CHECK(!r.add_bos); /* /tokenize adds none unless add_special */
    srv_request_free(&r);
}

TEST(serve_utf8_sanitize_maximal_subparts) {
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"ab\xC3\xA9", "ab\xC3\xA9"},                       /* valid stays */
        {"\xE2\x82" "A", "\xEF\xBF\xBD" "A"},               /* cut short: one U+FFFD */
        {"\xE2\x82", "\xEF\xBF\xBD"},                       /* cut at the end */
        {"\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD"},           /* lone continuations: one each */
        {"\xE0\x80\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* overlong: E0 80 is no start */
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* a surrogate */
        {"\xF0\x9F\x98" "x", "\xEF\xBF\xBD" "x"},           /* 3 of 4 bytes */
        {"\xFF", "\xEF\xBF\xBD"},
    };
    char out[64];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n = srv_utf8_sanitize(out, cases[i].in, strlen(cases[i].in));
        CHECKF(n == strlen(cases[i].out) && !strcmp(out, cases[i].out), "case %zu", i);
    }
}

TEST(serve_utf8_checks) {
    CHECK(srv_utf8_valid("", 0) && srv_utf8_valid("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", 10));
    CHECK(!srv_utf8_valid("\xC0\xAF", 2));         /* overlong */
    CHECK(!srv_utf8_valid("\xE0\x80\xAF", 3));     /* overlong */
    CHECK(!srv_utf8_valid("\xF4\x90\x80\x80", 4)); /* past U+10FFFF */
    CHECK(!srv_utf8_valid("\xE2\x82", 2));         /* cut short */
    CHECK(!srv_utf8_valid("\x80", 1));
}

/* -------------------------------------------------------------- batcher */

static const char *const TEXTS[] = {
    "the cat sat on the mat and the dog sat on the log; the bird sat on the branch.",
    "four score and seven years ago our fathers brought forth on this continent a new nation.",
};

/* What generating alone gives (difftx generate's loop): the tokens into out,
 * how many; stops at EOS, max or ctx. */
static dtx_kv_type alone_kv; /* the KV cache alone() generates with */
static int64_t alone(dtx_model *m, const dtx_tokenizer *t, const int32_t *p, int64_t n, int64_t max, int64_t ctx,
                     dtx_sampler s, int32_t *out) {
    const dtx_config *c = dtx_model_config(m);
    int64_t Vs = dtx_tokenizer_vocab_size(t) < c->vocab_size ? dtx_tokenizer_vocab_size(t) : c->vocab_size;
    dtx_kvcache *kv = NULL;
    dtx_real *lg = malloc(sizeof(dtx_real) * (size_t)c->vocab_size);
    dtx_rng rng;
    dtx_rng_seed(&rng, s.seed);
    int64_t k = 0;
    if (dtx_kvcache_init_type(&kv, m, ctx - 1, alone_kv) || dtx_model_prefill(m, kv, p, n, lg)) goto done;
    for (;;) {
        int32_t tok;
        if (dtx_sample_logits(&s, &rng, lg, Vs, &tok) || tok == dtx_tokenizer_eos(t)) break;
        out[k++] = tok;
        if (k == max || n + k == ctx || dtx_model_decode(m, kv, tok, lg)) break;
    }
done:
    dtx_kvcache_free(kv);
    free(lg);
    return k;
}

/* the text of ids [n], as the engine hands it out: as UTF-8 (the model may
 * sample byte tokens that make no character) */
static char *text_of(const dtx_tokenizer *t, const int32_t *ids, int64_t n) {
    char *s = NULL;
    size_t len = 0;
    if (dtx_tokenizer_decode(t, ids, n, &s, &len)) return NULL;
    char *o = malloc(3 * len + 1);
    if (o) srv_utf8_sanitize(o, s, len);
    free(s);
    return o;
}

enum { JOBS = 12, CTX = 48 };

typedef struct {
    srv_engine *e;
    srv_job *j;
    char text[4096];
    size_t len;
    srv_news last;
} reader;

static void *read_all(void *arg) {
    reader *r = arg;
    for (;;) {
        srv_news n;
        srv_job_wait(r->e, r->j, -1, &n);
        if (n.len && r->len + n.len < sizeof r->text) memcpy(r->text + r->len, n.text, n.len), r->len += n.len;
        free(n.text);
        if (n.done) {
            r->last = n;
            break;
        }
    }
    r->text[r->len] = 0;
    return NULL;
}

/* Every job's text is the text generating it alone gives, with fp32 and
 * with bf16 KV caches (--kv-cache), for DIFF and the Transformer. */
TEST(serve_batcher_jobs_equal_generating_alone) {
    const char *tok_path;
    dtx_tokenizer *t = test_tokenizer_file(TEXTS, 2, 300, "serve.tok", &tok_path);
    REQUIRE(t);
    for (int run = 0; run < 4; run++) {
        const int arch = run % 2;
        alone_kv = run < 2 ? DTX_KV_FP32 : DTX_KV_BF16;
        dtx_config c = test_config(arch ? DTX_ARCH_TRANSFORMER : DTX_ARCH_DIFF, 64, 2, arch ? 4 : 2, arch ? 4 : 2, 300,
                                   96, 64, 1);
        dtx_model *m = NULL;
        REQUIRE(dtx_model_init(&m, &c, 5) == DTX_OK);
        srv_engine_options o = {.slots = 3, .ctx = CTX, .kv = alone_kv};
        srv_engine *e = srv_engine_create(m, t, &o);
        REQUIREF(e, "%s", srv_last_error());
        reader rd[JOBS];
        pthread_t th[JOBS];
        int32_t prompts[JOBS][8];
        int64_t plen[JOBS], maxt[JOBS];
        dtx_sampler smp[JOBS];
        for (int i = 0; i < JOBS; i++) { /* mixed lengths, greedy and sampled, one with a stop string */
            plen[i] = 1 + i % 7, maxt[i] = 3 + (i * 7) % 40;
            for (int k = 0; k < plen[i]; k++) prompts[i][k] = (int32_t)((i * 31 + k * 17) % 290 + 5);
            smp[i] = (dtx_sampler){.temperature = i % 3 ? 0.9 : 0, .top_k = i % 4 == 1 ? 20 : 0, .top_p = i % 5 == 2 ? 0.8 : 1,
                                   .seed = 100 + (uint64_t)i};
            srv_gen g = {.prompt = prompts[i], .n_prompt = plen[i], .max_tokens = maxt[i], .sampler = smp[i]};
            memset(&rd[i], 0, sizeof rd[i]);
            rd[i].e = e;
            REQUIRE((rd[i].j = srv_engine_submit(e, &g)));
            pthread_create(&th[i], NULL, read_all, &rd[i]);
        }
        for (int i = 0; i < JOBS; i++) pthread_join(th[i], NULL);
        srv_stats st;
        srv_engine_stats(e, &st);
        CHECKF(st.steps < st.tokens, "%lld batched steps for %lld tokens: no step advanced two jobs", (long long)st.steps,
               (long long)st.tokens);
        for (int i = 0; i < JOBS; i++) {
            int32_t out[CTX];
            int64_t k = alone(m, t, prompts[i], plen[i], maxt[i], CTX, smp[i], out);
            char *want = text_of(t, out, k);
            REQUIRE(want);
            CHECKF(!strcmp(rd[i].text, want), "%s (%s cache) job %d: '%s', alone '%s'", dtx_arch_name(c.arch),
                   dtx_kv_type_name(alone_kv), i, rd[i].text, want);
            CHECKF(rd[i].last.completion_tokens == k, "job %d: %lld tokens, alone %lld", i,
                   (long long)rd[i].last.completion_tokens, (long long)k);
            const char *why = k == maxt[i] || plen[i] + k == CTX ? "length" : "stop";
            CHECKF(!strcmp(rd[i].last.finish, why), "job %d finished '%s', expected '%s'", i, rd[i].last.finish, why);
            free(want);
            srv_job_release(e, rd[i].j);
        }
        srv_engine_free(e);
        dtx_model_free(m);
    }
    dtx_tokenizer_free(t);
}

TEST(serve_batcher_stop_strings_cancel_and_drain) {
    const char *tok_path;
    dtx_tokenizer *t = test_tokenizer_file(TEXTS, 2, 300, "serve2.tok", &tok_path);
    REQUIRE(t);
    dtx_config c = test_config(DTX_ARCH_DIFF, 64, 2, 2, 2, 300, 96, 64, 1);
    dtx_model *m = NULL;
    REQUIRE(dtx_model_init(&m, &c, 9) == DTX_OK);
    srv_engine_options o = {.slots = 2, .ctx = CTX};
    srv_engine *e = srv_engine_create(m, t, &o);
    REQUIRE(e);
    int32_t p[2] = {10, 11}, out[CTX];
    dtx_sampler greedy = {.temperature = 0, .top_p = 1, .seed = 1};
    int64_t k = alone(m, t, p, 2, 30, CTX, greedy, out);
    REQUIRE(k >= 4);
    char *full = text_of(t, out, k), *third = text_of(t, out + 2, 1);
    REQUIRE(full && third && third[0]);
    /* a stop string: the text ends where its first occurrence starts */
    const char *stop[1] = {third};
    srv_gen g = {.prompt = p, .n_prompt = 2, .max_tokens = 30, .sampler = greedy, .stop = stop, .n_stop = 1};
    reader rd = {.e = e};
    REQUIRE((rd.j = srv_engine_submit(e, &g)));
    read_all(&rd);
    size_t cut = (size_t)(strstr(full, third) - full);
    CHECKF(strlen(rd.text) == cut && !strncmp(rd.text, full, cut) && !strcmp(rd.last.finish, "stop"),
           "stop '%s': '%s' (%s), full '%s'", third, rd.text, rd.last.finish, full);
    srv_job_release(e, rd.j);
    /* cancelled jobs (running and queued) free their slots; the engine goes on */
    srv_gen longg = {.prompt = p, .n_prompt = 2, .max_tokens = 40, .sampler = greedy};
    srv_job *a = srv_engine_submit(e, &longg), *b = srv_engine_submit(e, &longg), *q = srv_engine_submit(e, &longg);
    REQUIRE(a && b && q);
    srv_job_release(e, q);
    srv_job_release(e, a);
    srv_job_release(e, b);
    srv_stats st;
    for (int i = 0; i < 200; i++) {
        srv_engine_stats(e, &st);
        if (!st.busy && !st.queued) break;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    CHECKF(!st.busy && !st.queued, "%d slots busy, %d queued after cancelling", st.busy, st.queued);
    /* draining: what is in refuses nothing, what comes after is refused */
    reader last = {.e = e};
    REQUIRE((last.j = srv_engine_submit(e, &g)));
    srv_engine_drain(e);
    CHECK(srv_engine_submit(e, &g) == NULL && strstr(srv_last_error(), "shutting down"));
    read_all(&last);
    CHECK(!strcmp(last.last.finish, "stop"));
    srv_job_release(e, last.j);
    srv_engine_free(e);
    free(full);
    free(third);
    dtx_model_free(m);
    dtx_tokenizer_free(t);
}
