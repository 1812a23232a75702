/* Hugging Face checkpoint folders (src/io/hf.c): config.json, the shard
 * index and the shards. One input is the folder's files joined by the
 * separator "\0\0HF\0\0": config.json, then (optional) the index, then the
 * tensor files: model.safetensors when there is no index, else
 * model-0000K-of-00002.safetensors in order. A folder either imports, with
 * a config that validates and every weight finite, or is refused with a
 * message and nothing left allocated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "difftx.h"
#include "fuzz.h"

static const char SEP[6] = {0, 0, 'H', 'F', 0, 0};

/* File k of the folder: a symbolic link to an in-memory file (memfd), made
 * when the input has the file and removed when it has not, so that no disk
 * write is in the loop. */
static void put(const char *dir, int k, const char *name, const uint8_t *p, size_t n) {
    static int fd[5] = {-1, -1, -1, -1, -1}, linked[5];
    char path[512], target[64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (fd[k] < 0 && (fd[k] = memfd_create("difftx-fuzz-hf", MFD_CLOEXEC)) < 0) { perror("memfd_create"); abort(); }
    if (!p) {
        if (linked[k] && unlink(path) != 0) { perror(path); abort(); }
        linked[k] = 0;
        return;
    }
    if (ftruncate(fd[k], 0) != 0 || (n && pwrite(fd[k], p, n, 0) != (ssize_t)n)) { perror("memfd write"); abort(); }
    snprintf(target, sizeof target, "/proc/self/fd/%d", fd[k]);
    if (!linked[k] && symlink(target, path) != 0) { perror(path); abort(); }
    linked[k] = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[256];
    if (!dir[0]) {
        const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(dir, sizeof dir, "%s/difftx-fuzz-hf-XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : tmp);
        if (!mkdtemp(dir)) { perror("mkdtemp"); abort(); }
    }
    const uint8_t *part[5] = {0};
    size_t len[5] = {0};
    int n = 0;
    const uint8_t *p = data, *end = data + size;
    while (n < 5) {
        const uint8_t *s = memmem(p, (size_t)(end - p), SEP, sizeof SEP);
        part[n] = p, len[n] = (size_t)((s ? s : end) - p), n++;
        if (!s) break;
        p = s + sizeof SEP;
    }
    put(dir, 0, "config.json", part[0], len[0]);
    put(dir, 1, "model.safetensors.index.json", n > 2 ? part[1] : NULL, len[1]);
    put(dir, 2, "model.safetensors", n == 2 ? part[1] : NULL, len[1]);
    put(dir, 3, "model-00001-of-00002.safetensors", n > 2 ? part[2] : NULL, len[2]);
    put(dir, 4, "model-00002-of-00002.safetensors", n > 3 ? part[3] : NULL, len[3]);
    dtx_model *m = NULL;
    if (dtx_hf_import(&m, dir) != DTX_OK) {
        fuzz_check(m == NULL, "a failed import left a model");
        fuzz_check(dtx_last_error()[0] != '\0', "a failed import without a message");
        fuzz_check(strchr(dtx_last_error(), '\n') == NULL, "a message of more than one line: %s", dtx_last_error());
        return 0;
    }
    fuzz_check(dtx_config_validate(dtx_model_config(m)) == DTX_OK, "an imported config does not validate: %s",
               dtx_last_error());
    dtx_model_free(m);
    return 0;
}
