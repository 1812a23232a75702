/* bench/serve_bench.c: `make bench`'s serving section (bench.c calls
 * serve_bench_run). difftx serve's batcher (src/serve/engine.c), in this
 * process without HTTP: C clients submit requests at the same moment (a
 * prompt of PROMPT tokens, MAX_NEW new tokens each, greedy), each waited on
 * by a thread of its own. Per configuration: aggregate tokens/s (every
 * generated token ÷ the time from the submissions to the last answer), the
 * mean latency of a request and its mean time to first token; at 1, 4, 8 and
 * 16 concurrent requests with as many slots (continuous batching: one
 * batched decode step for all active requests) and with one slot (requests
 * served one at a time, the rest queued). Models: DIFF at config S and the
 * 110M shape, fp32, w8a16 and w4a16, random weights (the speed does not depend on
 * them). The tokenizer is a small byte-level BPE; the model samples among its
 * ids, so an answer may end early at EOS: the tokens counted are the ones
 * generated. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "difftx.h"
#include "serve/serve.h"

enum { PROMPT = 32, MAX_NEW = 64, MAXC = 16 };

typedef struct {
    int64_t dim, layers, heads, ffn, vocab;
    int tie;
} serve_shape;

typedef struct {
    srv_engine *e;
    srv_job *j;
    double t_submit, t_done, ttft;
    int64_t tokens;
} client;

static void *wait_client(void *arg) {
    client *c = arg;
    for (;;) {
        srv_news n;
        srv_job_wait(c->e, c->j, -1, &n);
        free(n.text);
        if (n.done) {
            c->t_done = dtx_now_s();
            c->ttft = n.first_token_s;
            c->tokens = n.completion_tokens;
            break;
        }
    }
    return NULL;
}

typedef struct {
    int ok;
    double agg, lat, ttft;
    int64_t tokens;
} serve_result;

static serve_result run_clients(dtx_model *m, const dtx_tokenizer *t, int clients, int slots) {
    serve_result r = {0};
    srv_engine_options o = {.slots = slots, .ctx = PROMPT + MAX_NEW + 1};
    srv_engine *e = srv_engine_create(m, t, &o);
    if (!e) return r;
    client c[MAXC];
    pthread_t th[MAXC];
    int32_t prompt[MAXC][PROMPT];
    int64_t V = dtx_tokenizer_vocab_size(t);
    double t0 = dtx_now_s();
    for (int i = 0; i < clients; i++) {
        for (int k = 0; k < PROMPT; k++) prompt[i][k] = (int32_t)((i * 131 + k * 17 + 3) % (V - 8) + 1);
        srv_gen g = {.prompt = prompt[i], .n_prompt = PROMPT, .max_tokens = MAX_NEW,
                     .sampler = {.temperature = 0, .top_p = 1, .seed = (uint64_t)i + 1}};
        c[i] = (client){.e = e, .t_submit = dtx_now_s()};
        c[i].j = srv_engine_submit(e, &g);
        if (!c[i].j) {
            srv_engine_free(e);
            return r;
        }
        pthread_create(&th[i], NULL, wait_client, &c[i]);
    }
    double last = t0;
    for (int i = 0; i < clients; i++) {
        pthread_join(th[i], NULL);
        if (c[i].t_done > last) last = c[i].t_done;
        r.tokens += c[i].tokens;
        r.lat += (c[i].t_done - c[i].t_submit) / clients;
        r.ttft += c[i].ttft / clients;
        srv_job_release(e, c[i].j);
    }
    srv_engine_free(e);
    r.agg = (double)r.tokens / (last - t0);
    r.ok = 1;
    return r;
}

void serve_bench_run(int quick, void (*out)(const char *fmt, ...));
void serve_bench_run(int quick, void (*out)(const char *fmt, ...)) {
    static const char *const WNAME[3] = {"fp32", "w8a16", "w4a16"};
    static const struct {
        const char *name;
        serve_shape s;
    } shapes[2] = {{"S", {512, 8, 4, 1408, 8192, 0}}, {"110M", {768, 12, 6, 2048, 32000, 1}}};
    static const char *const text[] = {
        "We the people of the United States, in order to form a more perfect union, establish justice, insure "
        "domestic tranquility, provide for the common defence, promote the general welfare, and secure the "
        "blessings of liberty to ourselves and our posterity, do ordain and establish this constitution."};
    size_t lens[1] = {strlen(text[0])};
    dtx_tokenizer *t = NULL;
    if (dtx_tokenizer_train_texts(&t, text, lens, 1, 400) != DTX_OK) {
        out("Serving: no tokenizer (%s)\n\n", dtx_last_error());
        return;
    }
    out("\n## Serving (difftx serve's batcher)\n\n"
        "DIFF, random weights; %d clients submit at once, each a %d-token prompt and %d new tokens (greedy; an "
        "answer may end early at EOS, and only generated tokens count). Batched: as many slots as clients, one "
        "batched decode step for all active requests (continuous batching); one at a time: one slot, the other "
        "requests queued. Aggregate tokens/s = generated tokens ÷ the time from the submissions to the last "
        "answer; latency and time to first token are means over the requests. In this process, without HTTP "
        "(bench/serve_bench.c).\n\n",
        MAXC, PROMPT, MAX_NEW);
    out("| config | weights | clients | batched tok/s | one at a time tok/s | × | batched latency s | one at a time "
        "latency s | batched first token s | one at a time first token s |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    static const int counts[4] = {1, 4, 8, 16};
    for (int si = 0; si < (quick ? 1 : 2); si++)
        for (int q = 0; q < 3; q++) {
            const serve_shape *s = &shapes[si].s;
            dtx_config c = dtx_config_default();
            c.arch = DTX_ARCH_DIFF, c.dim = s->dim, c.n_layers = s->layers, c.n_heads = c.n_kv_heads = s->heads;
            c.ffn_dim = s->ffn, c.vocab_size = s->vocab, c.max_seq_len = PROMPT + MAX_NEW + 1, c.tie_embeddings = s->tie;
            dtx_model *m = NULL;
            if (dtx_model_init(&m, &c, 1) != DTX_OK) {
                out("| %s | %s | failed: %s |\n", shapes[si].name, WNAME[q], dtx_last_error());
                continue;
            }
            if (q) {
                int32_t cal[4 * 64];
                for (int i = 0; i < 4 * 64; i++) cal[i] = (int32_t)((i * 7919) % s->vocab);
                dtx_quant_options o = dtx_quant_options_default(q == 1 ? DTX_WQ_W8A16 : DTX_WQ_W4A16);
                o.clip_search = 0;
                if (dtx_model_quantize(m, &o, cal, 4, 64, NULL) != DTX_OK) {
                    out("| %s | %s | failed: %s |\n", shapes[si].name, WNAME[q], dtx_last_error());
                    dtx_model_free(m);
                    continue;
                }
            }
            for (int k = 0; k < 4; k++) {
                int n = counts[k];
                if (quick && n > 8) continue;
                serve_result b = run_clients(m, t, n, n), one = n == 1 ? b : run_clients(m, t, n, 1);
                if (!b.ok || !one.ok) {
                    out("| %s | %s | %d | failed: %s |\n", shapes[si].name, WNAME[q], n, srv_last_error());
                    continue;
                }
                fprintf(stderr, "  serve %s %s %d clients: %.1f tok/s batched, %.1f one at a time\n", shapes[si].name,
                        WNAME[q], n, b.agg, one.agg);
                out("| %s | %s | %d | %.1f | %.1f | %.2f | %.2f | %.2f | %.3f | %.3f |\n", shapes[si].name,
                    WNAME[q], n, b.agg, one.agg, b.agg / one.agg, b.lat, one.lat, b.ttft, one.ttft);
            }
            dtx_model_free(m);
        }
    out("\n");
    dtx_tokenizer_free(t);
}
