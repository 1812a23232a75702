/* Token shards (difftx prepare's binary format): a shard that opens must
 * hold only ids below its vocab_size, read back in bounds. */
#include "difftx.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dtx_shard *s = NULL;
    /* 0: the shard's own vocab_size; a small one: ids above it are refused */
    int64_t vocab = size && (data[size - 1] & 1) ? 1000 : 0;
    if (dtx_shard_open(&s, fuzz_path(data, size), vocab) != DTX_OK) {
        fuzz_check(s == NULL, "a failed open left a shard");
        fuzz_check(dtx_last_error()[0] != '\0', "a failed open without a message");
        return 0;
    }
    int64_t n = dtx_shard_count(s), v = dtx_shard_vocab_size(s);
    fuzz_check(n >= 0 && v >= 1 && (vocab == 0 || v <= vocab), "count %lld vocab %lld", (long long)n, (long long)v);
    for (int64_t i = 0; i < n && i < 4096; i++) {
        int32_t id = dtx_shard_get(s, i);
        fuzz_check(id >= 0 && id < v, "token %lld has id %d, vocab %lld", (long long)i, id, (long long)v);
    }
    dtx_shard_close(s);
    return 0;
}
