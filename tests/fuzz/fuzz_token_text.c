/* Token text files (whitespace-separated ids): every id read is in range,
 * and a file that is refused says why. */
#include "difftx.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int32_t *ids = NULL;
    int64_t n = 0;
    const int64_t vocab = 50000;
    if (dtx_tokens_read(fuzz_path(data, size), vocab, &ids, &n) != DTX_OK) {
        fuzz_check(dtx_last_error()[0] != '\0', "a refusal without a message");
        free(ids);
        return 0;
    }
    fuzz_check(n >= 0 && (size_t)n <= size / 2 + 1, "%lld ids from %zu bytes", (long long)n, size);
    for (int64_t i = 0; i < n; i++) fuzz_check(ids[i] >= 0 && ids[i] < vocab, "id %d out of range", ids[i]);
    free(ids);
    return 0;
}
