/* difftx serve: the OpenAI-compatible server and the attention explorer
 * (docs/serve.md; src/serve/). The model and tokenizer are loaded and the
 * port bound before the first line on stdout ("listening on ..."), so a
 * script can wait for that line; SIGINT or SIGTERM stops taking requests,
 * lets those in flight finish, and exits 0. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "serve/serve.h"

int cmd_serve(int argc, char **argv);

static const char *CMD = "serve";

static const char USAGE[] =
    "usage: difftx serve --model MODEL --tokenizer TOK [--host 127.0.0.1] [--port 8080]\n"
    "                    [--slots N] [--ctx N] [--api-key KEY] [--compare MODEL2]\n"
    "                    [--precision fp32|bf16] [--kv-cache auto|fp32|bf16] [--max-body BYTES]\n"
    "                    [--timeout S]\n"
    "\n"
    "Serves MODEL over HTTP: the OpenAI API (POST /v1/completions,\n"
    "/v1/chat/completions; GET /v1/models), GET /health, POST /tokenize and\n"
    "/detokenize, and at GET / an attention explorer (POST /v1/attention). Up to\n"
    "N requests generate together, one batched decode step for all of them\n"
    "(continuous batching); more wait in a queue. Answers equal difftx generate's\n"
    "for the same prompt, seed and sampling settings. Binds to localhost unless\n"
    "--host says otherwise. SIGTERM lets requests in flight finish, then exits 0.\n"
    "\n";

static volatile sig_atomic_t stop_asked;
static void on_signal(int sig) { (void)sig, stop_asked = 1; }

/* The file's name without its folders (the API's model id). */
static const char *base_name(const char *p) {
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') n--;
    const char *b = p;
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '/') b = p + i + 1;
    return b;
}

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *tokenizer = NULL, *host = "127.0.0.1", *api_key = NULL, *compare = NULL;
    int64_t port = 8080, slots = 4, ctx = 0, max_body = 1 << 20, timeout = 30;
    int precision = DTX_PREC_FP32, kv_cache = 0; /* auto */
    flag fl[] = {
        DTX_FLAG_MODEL(&model),
        FLAG_TOKENIZER_FILE(&tokenizer),
        FLAG_STR("--host", &host, .metavar = "ADDR", .help = "the address to listen on (default 127.0.0.1: this machine only)"),
        FLAG_INT("--port", &port, 0, 65535, .metavar = "N", .help = "the port (default 8080; 0: any free one, printed)"),
        FLAG_INT("--slots", &slots, 1, 256, .metavar = "N", .help = "requests generating together (default 4)"),
        FLAG_INT("--ctx", &ctx, 2, INT32_MAX, .metavar = "N",
                 .help = "most tokens of one request, prompt and completion (default: the model's max_seq_len)"),
        FLAG_STR("--api-key", &api_key, .metavar = "KEY",
                 .help = "require 'Authorization: Bearer KEY' (all routes but / and /health)"),
        FLAG_STR("--compare", &compare, .metavar = "MODEL2",
                 .help = "a second model (same tokenizer) whose maps the explorer shows beside"),
        DTX_FLAG_PRECISION(&precision),
        DTX_FLAG_KV_CACHE(&kv_cache),
        FLAG_INT("--max-body", &max_body, 1024, 1 << 30, .metavar = "BYTES",
                 .help = "largest request body (default 1048576)"),
        FLAG_INT("--timeout", &timeout, 1, 3600, .metavar = "S",
                 .help = "close a connection idle this long (default 30)"),
    };
    switch (flags_parse(CMD, USAGE, fl, (int)(sizeof fl / sizeof fl[0]), argc, argv, NULL, 0, NULL)) {
    case FLAGS_HELP: return finish_stdout(CMD);
    case FLAGS_ERROR: return EXIT_USAGE;
    }
    if (api_key && !api_key[0]) return usage_error(CMD, "--api-key: the key is empty");
    dtx_model *m = NULL, *m2 = NULL;
    dtx_tokenizer *t = NULL;
    int rc = cli_load_model_and_tokenizer(CMD, model, tokenizer, precision, &m, &t);
    if (rc == EXIT_OK && compare && cli_model_load(&m2, compare, precision) != DTX_OK) rc = lib_error(CMD);
    if (rc == EXIT_OK && m2 && dtx_tokenizer_vocab_size(t) > dtx_model_config(m2)->vocab_size)
        rc = usage_error(CMD, "--compare: %s has %lld tokens, fewer than the tokenizer's %lld", compare,
                         (long long)dtx_model_config(m2)->vocab_size, (long long)dtx_tokenizer_vocab_size(t));
    const int64_t max_len = rc == EXIT_OK ? dtx_model_config(m)->max_seq_len : 0;
    if (rc == EXIT_OK && ctx > max_len)
        rc = usage_error(CMD, "--ctx %lld: the model's max_seq_len is %lld", (long long)ctx, (long long)max_len);
    srv_engine *e = NULL;
    srv_http *h = NULL;
    /* SIGINT and SIGTERM blocked in every thread (the engine's and the
     * server's inherit the mask) and taken by sigsuspend below only */
    sigset_t stop_sigs, waiting;
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGINT);
    sigaddset(&stop_sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_sigs, &waiting);
    sigdelset(&waiting, SIGINT);
    sigdelset(&waiting, SIGTERM);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (rc == EXIT_OK) {
        srv_engine_options eo = {.slots = (int)slots, .ctx = ctx ? ctx : max_len, .kv = DTX_KV_CHOICE_TYPE(m, kv_cache)};
        if (!(e = srv_engine_create(m, t, &eo))) rc = runtime_error(CMD, "%s", srv_last_error());
    }
    if (rc == EXIT_OK) {
        srv_http_options ho = {.host = host, .port = (int)port, .api_key = api_key, .model_name = base_name(model),
                               .max_body = (size_t)max_body, .timeout_s = (int)timeout, .max_connections = 256,
                               .compare = m2, .compare_name = compare ? base_name(compare) : NULL};
        if (!(h = srv_http_start(e, t, &ho))) rc = runtime_error(CMD, "%s", srv_last_error());
    }
    if (rc == EXIT_OK) {
        printf("difftx serve: listening on http://%s%s%s:%d/ (%s, %lld slots of %lld tokens)\n",
               strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", srv_http_port(h), base_name(model),
               (long long)slots, (long long)(ctx ? ctx : max_len));
        fflush(stdout);
        while (!stop_asked) sigsuspend(&waiting);
        fprintf(stderr, "difftx serve: stopping: finishing the requests in flight\n");
        srv_http_stop(h);
    }
    srv_engine_free(e);
    dtx_model_free(m);
    dtx_model_free(m2);
    dtx_tokenizer_free(t);
    return rc;
}
