/* The invariants of a tokenizer file that loads (fuzz_tokenizer_json,
 * fuzz_tokenizer_model): it encodes a fixed sample and the first bytes of
 * the input itself, in both modes, to ids below its vocabulary size that
 * decode. A file that does not load leaves no tokenizer and a message. */
#ifndef DTX_FUZZ_TOKENIZER_USE_H
#define DTX_FUZZ_TOKENIZER_USE_H

#include <string.h>

#include "difftx.h"
#include "fuzz.h"

static void fuzz_tokenizer_encode_check(const dtx_tokenizer *t, const char *text, size_t len) {
    for (int mode = 0; mode < 2; mode++) {
        int32_t *ids = NULL;
        int64_t n = 0;
        fuzz_check(dtx_tokenizer_encode(t, text, len, (dtx_encode_mode)mode, &ids, &n) == DTX_OK, "encode failed: %s",
                   dtx_last_error());
        for (int64_t i = 0; i < n; i++)
            fuzz_check(ids[i] >= 0 && ids[i] < dtx_tokenizer_vocab_size(t), "id %ld of vocab %lld", (long)ids[i],
                       (long long)dtx_tokenizer_vocab_size(t));
        char *back = NULL;
        size_t blen = 0;
        fuzz_check(dtx_tokenizer_decode(t, ids, n, &back, &blen) == DTX_OK, "decode of encoded ids failed: %s",
                   dtx_last_error());
        free(back);
        free(ids);
    }
}

static void fuzz_tokenizer_use(const char *path, const uint8_t *data, size_t size) {
    dtx_tokenizer *t = NULL;
    if (dtx_tokenizer_load(&t, path) != DTX_OK) {
        fuzz_check(t == NULL, "a failed load left a tokenizer");
        fuzz_check(dtx_last_error()[0] != '\0', "a failed load without a message");
        return;
    }
    static const char sample[] = "Hello, world! It's 2024: \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80\n\n  x<|endoftext|>"
                                 "<s></s><unk>\xff\xfe 12345 \t end ";
    fuzz_tokenizer_encode_check(t, sample, sizeof sample - 1);
    fuzz_tokenizer_encode_check(t, (const char *)data, size < 256 ? size : 256);
    int32_t bos = dtx_tokenizer_bos(t), eos = dtx_tokenizer_eos(t);
    fuzz_check(bos < dtx_tokenizer_vocab_size(t) && eos < dtx_tokenizer_vocab_size(t), "bos %ld, eos %ld", (long)bos,
               (long)eos);
    dtx_tokenizer_free(t);
}

#endif
