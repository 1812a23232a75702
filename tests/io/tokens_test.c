/* Token text files: ids separated by any whitespace; every bad token is
 * refused with its line and index. */
#include <string.h>
#include <stdlib.h>

#include "common/common.h"
#include "test.h"

static dtx_status read_str(const char *text, int64_t vocab, int32_t **t, int64_t *n) {
    const char *p = test_path("tok.txt");
    if (write_file(p, text, strlen(text))) return DTX_ERR_IO;
    return dtx_tokens_read(p, vocab, t, n);
}

TEST(tokens_read_ok) {
    int32_t *t;
    int64_t n;
    REQUIRE(read_str(" 1 2\n\t3  40\r\n0", 50, &t, &n) == DTX_OK);
    CHECK(n == 5 && t[0] == 1 && t[1] == 2 && t[2] == 3 && t[3] == 40 && t[4] == 0);
    free(t);
    REQUIRE(read_str("", 50, &t, &n) == DTX_OK);
    CHECK(n == 0);
    free(t);
}

TEST(tokens_read_errors) {
    int32_t *t = NULL;
    int64_t n;
    CHECK(read_str("1 2\n3 x7", 50, &t, &n) == DTX_ERR_FORMAT && strstr(dtx_last_error(), ":2:") &&
          strstr(dtx_last_error(), "'x7'"));
    CHECK(read_str("1 -2", 50, &t, &n) == DTX_ERR_FORMAT && strstr(dtx_last_error(), "'-2'"));
    CHECK(read_str("1 2 50", 50, &t, &n) == DTX_ERR_ARG && strstr(dtx_last_error(), "token 2") &&
          strstr(dtx_last_error(), "50"));
    CHECK(read_str("99999999999", 0, &t, &n) == DTX_ERR_FORMAT);
    CHECK(t == NULL);
    CHECK(dtx_tokens_read(test_path("does-not-exist"), 10, &t, &n) == DTX_ERR_IO &&
          strstr(dtx_last_error(), "does-not-exist"));
}
