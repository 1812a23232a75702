/* Tokenizer files: ours and tiktoken rank files (told apart by the first
 * line). In a tokenizer that loads, an id below vocab_size decodes or is
 * refused as naming no token (a rank file may leave ranks out), and the bytes
 * of one that decodes encode and decode back to the same bytes. */
#include <string.h>

#include "difftx.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dtx_tokenizer *t = NULL;
    if (dtx_tokenizer_load(&t, fuzz_path(data, size)) != DTX_OK) {
        fuzz_check(t == NULL, "a failed load left a tokenizer");
        fuzz_check(dtx_last_error()[0] != '\0', "a failed load without a message");
        return 0;
    }
    int64_t ord = dtx_tokenizer_num_ordinary(t), vocab = dtx_tokenizer_vocab_size(t);
    fuzz_check(ord >= 256 && ord <= vocab, "ordinary %lld of vocab %lld", (long long)ord, (long long)vocab);
    /* the first ids after the bytes (a rank file may leave ids out: those are
     * refused by decode): each decodes, and its bytes encode and decode back */
    for (int32_t id = 256; id < vocab && id < 256 + 64; id++) {
        char *text = NULL;
        size_t len = 0;
        dtx_status st = dtx_tokenizer_decode(t, &id, 1, &text, &len);
        if (st == DTX_ERR_ARG) continue; /* an id that names no token */
        fuzz_check(st == DTX_OK, "id %d: decode failed: %s", id, dtx_last_error());
        int32_t *ids = NULL;
        int64_t n = 0;
        fuzz_check(dtx_tokenizer_encode(t, text, len, DTX_ENCODE_ORDINARY, &ids, &n) == DTX_OK, "encode failed: %s",
                   dtx_last_error());
        char *back = NULL;
        size_t blen = 0;
        fuzz_check(dtx_tokenizer_decode(t, ids, n, &back, &blen) == DTX_OK && blen == len && !memcmp(back, text, len),
                   "id %d: decode(encode(bytes)) differs", id);
        free(back);
        free(ids);
        free(text);
    }
    dtx_tokenizer_free(t);
    return 0;
}
