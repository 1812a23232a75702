/* Hugging Face tokenizer.json files (src/io/tokenizer_hf.c; the loader
 * tells them apart by content, so other kinds are reached too). A file
 * either loads or is refused with a message and nothing left allocated; a
 * tokenizer that loads encodes a fixed sample and part of the input itself
 * in both modes to ids that are its tokens, and decodes them. */
#include "difftx.h"
#include "fuzz.h"
#include "tokenizer_use.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_tokenizer_use(fuzz_path(data, size), data, size);
    return 0;
}
