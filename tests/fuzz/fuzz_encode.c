/* The tokenizer's encoder on arbitrary bytes: decode(encode(bytes)) must be
 * the bytes, in both modes (special-token text becomes its id, and decodes
 * back to its name), and every id below vocab_size. The tokenizer: one
 * trained here on a fixed text at startup (byte-level BPE with the
 * cl100k_base split pattern), so the input reaches merges and specials. */
#include <string.h>

#include "difftx.h"
#include "fuzz.h"

static dtx_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    static const char text[] =
        "The Differential Transformer subtracts one softmax map from another, so the noise both put on "
        "irrelevant tokens cancels. 12345 67890 it's they're we'll  \n\n\t  ünïcödé 日本語 ?!... <|bos|> x";
    const char *texts[1] = {text};
    size_t lens[1] = {sizeof text - 1};
    if (dtx_tokenizer_train_texts(&tok, texts, lens, 1, 400) != DTX_OK) {
        fprintf(stderr, "fuzz_encode: %s\n", dtx_last_error());
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int mode = 0; mode < 2; mode++) {
        int32_t *ids = NULL;
        int64_t n = 0;
        fuzz_check(dtx_tokenizer_encode(tok, (const char *)data, size, (dtx_encode_mode)mode, &ids, &n) == DTX_OK,
                   "encode failed: %s", dtx_last_error());
        for (int64_t i = 0; i < n; i++)
            fuzz_check(ids[i] >= 0 && ids[i] < dtx_tokenizer_vocab_size(tok), "id %d out of range", ids[i]);
        char *back = NULL;
        size_t len = 0;
        fuzz_check(dtx_tokenizer_decode(tok, ids, n, &back, &len) == DTX_OK, "decode failed: %s", dtx_last_error());
        fuzz_check(len == size && (size == 0 || memcmp(back, data, size) == 0), "mode %d: round trip differs", mode);
        free(back);
        free(ids);
    }
    return 0;
}
