/* The command line's number and list parsers (src/common/flags.c): the whole
 * string or nothing; a number parsed prints back to one that parses to the
 * same value; a list has only distinct values in range. The input (up to
 * its first NUL) is tried as each. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "difftx.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char s[512];
    size_t n = size < sizeof s - 1 ? size : sizeof s - 1;
    memcpy(s, data, n);
    s[n] = '\0';
    int64_t i;
    if (dtx_parse_i64(s, &i) == 0) {
        char back[32];
        snprintf(back, sizeof back, "%lld", (long long)i);
        int64_t j;
        fuzz_check(dtx_parse_i64(back, &j) == 0 && i == j, "'%s' -> %lld does not read back", s, (long long)i);
    }
    double d;
    if (dtx_parse_f64(s, &d) == 0) {
        fuzz_check(isfinite(d), "'%s' parsed to a non-finite %g", s, d);
        char back[40];
        snprintf(back, sizeof back, "%.17g", d);
        double e;
        fuzz_check(dtx_parse_f64(back, &e) == 0 && e == d, "'%s' -> %.17g does not read back", s, d);
    }
    int64_t out[16];
    int k = dtx_flags_int_list("--list", s, -5, 1000, out, 16);
    fuzz_check(k >= -1 && k <= 16, "list count %d", k);
    for (int a = 0; a < k; a++) {
        fuzz_check(out[a] >= -5 && out[a] <= 1000, "list value %lld out of range", (long long)out[a]);
        for (int b = 0; b < a; b++) fuzz_check(out[a] != out[b], "list value %lld repeated", (long long)out[a]);
    }
    return 0;
}
