/* dtx_eval_run, the evaluations' library entry point: the registry, --help,
 * a bad option refused as DTX_ERR_USAGE before any work with the command's
 * message, the progress callback counting up to its total, the JSON written
 * with --json being the JSON returned, and nothing left on failure. (Python's
 * difftx.eval against the difftx command: tests/python/test_difftx.py.) */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "difftx.h"
#include "test.h"

typedef struct {
    int64_t calls, last_done, last_total, backwards;
} progress_log;

static void count(void *user, const char *what, int64_t done, int64_t total) {
    progress_log *p = user;
    if (total == 0) return; /* a note */
    p->backwards += done < p->last_done || done > total || strncmp(what, "ppl:", 4) != 0;
    p->calls++, p->last_done = done, p->last_total = total;
}

TEST(eval_run_registry_and_help) {
    CHECK(dtx_eval_count() == 8);
    const char *summary = NULL;
    for (int i = 0; i < dtx_eval_count(); i++) CHECK(dtx_eval_name(i, &summary) && summary && summary[0]);
    CHECK(dtx_eval_name(dtx_eval_count(), NULL) == NULL && dtx_eval_name(-1, NULL) == NULL);
    CHECK(strcmp(dtx_eval_name(1, NULL), "needle") == 0);
    char *text = NULL, *json = NULL, *help[] = {"--help"};
    for (int i = 0; i < dtx_eval_count(); i++) {
        CHECK(dtx_eval_run(dtx_eval_name(i, NULL), 1, help, NULL, NULL, &text, &json) == DTX_OK);
        CHECKF(text && strstr(text, "usage: difftx eval ") && !json, "%s", dtx_eval_name(i, NULL));
        free(text);
    }
    CHECK(dtx_eval_run("nonesuch", 0, NULL, NULL, NULL, &text, &json) == DTX_ERR_USAGE && !text && !json &&
          strstr(dtx_last_error(), "unknown measurement 'nonesuch'"));
    CHECK(dtx_eval_run("ppl", 0, NULL, NULL, NULL, NULL, &json) == DTX_ERR_ARG);
}

TEST(eval_run_refuses_bad_options_before_work) {
    char *text = (char *)1, *json = (char *)1;
    char *no_model[] = {"--tokens", "x"};
    CHECK(dtx_eval_run("ppl", 2, no_model, NULL, NULL, &text, &json) == DTX_ERR_USAGE && !text && !json);
    CHECK(strcmp(dtx_last_error(), "--model is required") == 0);
    char *bad[] = {"--model", "m", "--tokens", "t", "--stride", "0"};
    CHECK(dtx_eval_run("ppl", 6, bad, NULL, NULL, &text, &json) == DTX_ERR_USAGE);
    CHECK(strstr(dtx_last_error(), "--stride: expected a positive integer, got '0'") != NULL);
    char *unknown[] = {"--modle", "m"};
    CHECK(dtx_eval_run("needle", 2, unknown, NULL, NULL, &text, &json) == DTX_ERR_USAGE);
    CHECK(strstr(dtx_last_error(), "unknown flag '--modle' (see 'difftx eval needle --help')") != NULL);
    char *missing[] = {"--model", (char *)test_path("missing.safetensors"), "--tokens", "t"};
    CHECK(dtx_eval_run("ppl", 4, missing, NULL, NULL, &text, &json) == DTX_ERR_IO && !text && !json);
}

TEST(eval_run_ppl_progress_and_json) {
    const char *model = fixture_path("diff_mha_tied.model.safetensors");
    dtx_model *m = NULL;
    REQUIRE(dtx_model_load(&m, model) == DTX_OK);
    int64_t V = dtx_model_config(m)->vocab_size, T = dtx_model_config(m)->max_seq_len;
    dtx_model_free(m);
    char ids[4096];
    size_t n = 0;
    for (int i = 0; i < 5 * T; i++) n += (size_t)snprintf(ids + n, sizeof ids - n, "%d ", (int)((i * 7 + 3) % V));
    const char *tokens = test_path("run_tokens.txt"), *out = test_path("run_ppl.json");
    REQUIRE(write_file(tokens, ids, n) == 0);
    char *argv[] = {"--model", (char *)model, "--tokens", (char *)tokens, "--json", (char *)out};
    progress_log log = {0};
    char *text = NULL, *json = NULL;
    REQUIREF(dtx_eval_run("ppl", 6, argv, count, &log, &text, &json) == DTX_OK, "%s", dtx_last_error());
    CHECK(text && strstr(text, "perplexity"));
    CHECKF(log.calls >= 2 && !log.backwards && log.last_done == log.last_total && log.last_total == 5 * T - 1,
           "calls %lld, last %lld of %lld", (long long)log.calls, (long long)log.last_done, (long long)log.last_total);
    size_t len = 0;
    char *file = test_slurp(out, &len);
    CHECK(file && json && strcmp(file, json) == 0);
    cJSON *j = cJSON_Parse(json);
    CHECK(j && cJSON_GetObjectItem(j, "tokens") && cJSON_GetObjectItem(j, "tokens")->valuedouble == 5 * T - 1);
    cJSON_Delete(j);
    free(file), free(text), free(json);
}
