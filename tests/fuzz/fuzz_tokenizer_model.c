/* SentencePiece tokenizer.model files (src/io/tokenizer_spm.c: its
 * bounds-checked protobuf reader; the loader tells the kinds apart by
 * content). The same invariants as fuzz_tokenizer_json. */
#include "difftx.h"
#include "fuzz.h"
#include "tokenizer_use.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_tokenizer_use(fuzz_path(data, size), data, size);
    return 0;
}
