/* Runs a fuzz target's LLVMFuzzerTestOneInput over files, without libFuzzer:
 * `make test` replays every committed regression input and seed this way
 * with the ordinary gcc build (tests/fuzz/regressions/TARGET/), so a crash
 * the fuzzer once found stays fixed on machines without clang.
 * usage: replay FILE... ; exit 0 when every input ran. */
#include <stdio.h>
#include <stdlib.h>

#include "common/common.h"
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        char *buf = NULL;
        size_t n = 0;
        if (dtx_read_file(argv[i], &buf, &n) != DTX_OK) {
            fprintf(stderr, "replay: %s\n", dtx_last_error());
            return 1;
        }
        LLVMFuzzerTestOneInput((const uint8_t *)buf, n);
        free(buf);
    }
    printf("%d inputs replayed\n", argc - 1);
    return 0;
}
