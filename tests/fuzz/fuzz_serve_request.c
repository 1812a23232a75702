/* difftx serve's request bodies (src/serve/request.c): the first byte picks
 * the route (completion, chat, tokenize, detokenize, attention), the rest is
 * the body as a client sent it. A body is either taken, with every field in
 * its documented range, or refused with a 4xx and a message; and the
 * UTF-8 repair of generated text always gives valid UTF-8 of bounded size. */
#include <string.h>

#include "fuzz.h"
#include "serve/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    srv_kind kind = (srv_kind)(data[0] % 5);
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    srv_request r;
    srv_error e = {0};
    if (srv_request_parse(kind, body, len, &r, &e)) {
        fuzz_check(r.kind == kind, "kind %d for %d", (int)r.kind, (int)kind);
        fuzz_check(r.temperature >= 0 && r.temperature <= 2, "temperature %g", r.temperature);
        fuzz_check(r.top_p > 0 && r.top_p <= 1, "top_p %g", r.top_p);
        fuzz_check(r.max_tokens == -1 || r.max_tokens >= 1, "max_tokens %lld", (long long)r.max_tokens);
        fuzz_check(r.n_stop >= 0 && r.n_stop <= SRV_MAX_STOP, "%d stop strings", r.n_stop);
        for (int i = 0; i < r.n_stop; i++) fuzz_check(strlen(r.stop[i]) <= SRV_MAX_STOP_LEN, "a long stop string");
        fuzz_check(kind == SRV_DETOKENIZE || r.text || r.ids, "no prompt in a taken request");
        for (int64_t i = 0; i < r.n_ids; i++) fuzz_check(r.ids[i] >= 0, "id %d", r.ids[i]);
        if (r.text) fuzz_check(srv_utf8_valid(r.text, strlen(r.text)), "a prompt that is not UTF-8");
        fuzz_check(kind != SRV_ATTENTION || (r.layer >= 0 && r.head >= 0), "attention without layer/head");
    } else {
        fuzz_check(e.status >= 400 && e.status < 600 && e.message[0], "a refusal without status or message");
    }
    srv_request_free(&r);
    char *out = malloc(3 * len + 1);
    if (!out) return 0;
    size_t n = srv_utf8_sanitize(out, body, len);
    fuzz_check(n <= 3 * len && out[n] == 0, "sanitized to %zu bytes from %zu", n, len);
    fuzz_check(srv_utf8_valid(out, n), "sanitized text that is not UTF-8");
    if (srv_utf8_valid(body, len)) fuzz_check(n == len && !memcmp(out, body, len), "valid UTF-8 changed");
    free(out);
    return 0;
}
