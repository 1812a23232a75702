/* What the fuzz targets share (tests/fuzz/, `make fuzz`, docs/fuzzing.md).
 * Each target is one LLVMFuzzerTestOneInput over one reader of untrusted
 * bytes, built by clang with libFuzzer, AddressSanitizer and UBSan. A reader
 * that takes a path reads the input through fuzz_path: an in-memory file
 * (memfd) named /proc/self/fd/N, rewritten for every input, so no disk
 * write is in the loop. Any crash, leak, sanitizer report or broken
 * invariant (fuzz_check) is a finding. */
#ifndef DTX_FUZZ_H
#define DTX_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The path of a file that holds exactly data[0, size). */
const char *fuzz_path(const uint8_t *data, size_t size);

/* An invariant of the reader: abort (a finding) with a message when false. */
#define fuzz_check(cond, ...)                                                   \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "fuzz invariant failed at %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
            abort();                                                            \
        }                                                                       \
    } while (0)

#endif
