/* src/common/common.c: the atomic file write (a new file, a replaced one, a
 * failure that leaves nothing behind, a FIFO written in place) and the
 * read-only whole-file map, the release of memory no longer read. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "test.h"

TEST(common_write_file_atomic) {
    const char *p = test_path("out.json");
    CHECK(dtx_write_file_atomic(p, "{}\n", 3) == DTX_OK);
    size_t n = 0;
    char *got = test_slurp(p, &n);
    CHECK(got && n == 3 && strcmp(got, "{}\n") == 0);
    free(got);
    /* an existing file is replaced whole */
    CHECK(dtx_write_file_atomic(p, "[1]", 3) == DTX_OK);
    got = test_slurp(p, &n);
    CHECK(got && n == 3 && strcmp(got, "[1]") == 0);
    free(got);
    CHECK(dtx_write_file_atomic(p, "", 0) == DTX_OK);
    got = test_slurp(p, &n);
    CHECK(got && n == 0);
    free(got);
    CHECK(test_no_temp_files(test_tmpdir()));
}

TEST(common_write_file_atomic_fails) {
    char bad[1024];
    snprintf(bad, sizeof bad, "%s/no-such-dir/out.json", test_tmpdir());
    CHECK(dtx_write_file_atomic(bad, "{}", 2) == DTX_ERR_IO);
    /* "PATH: what: strerror" */
    CHECK(strncmp(dtx_last_error(), bad, strlen(bad)) == 0);
    CHECK(strstr(dtx_last_error(), "cannot write") && strstr(dtx_last_error(), strerror(ENOENT)));
    /* a folder is not a regular file: opened in place, which fails */
    const char *dir = test_path("a-folder");
    REQUIRE(mkdir(dir, 0755) == 0);
    CHECK(dtx_write_file_atomic(dir, "{}", 2) == DTX_ERR_IO);
    CHECK(strstr(dtx_last_error(), "a-folder: cannot write: ") && strstr(dtx_last_error(), strerror(EISDIR)));
    CHECK(test_no_temp_files(test_tmpdir()));
    /* a path under a plain file: ENOTDIR, nothing left behind */
    char under_file[1024];
    const char *plain = test_path("plain.txt");
    REQUIRE(write_file(plain, "x", 1) == 0);
    snprintf(under_file, sizeof under_file, "%s/out.json", plain);
    CHECK(dtx_write_file_atomic(under_file, "{}", 2) == DTX_ERR_IO && strstr(dtx_last_error(), strerror(ENOTDIR)));
    CHECK(test_no_temp_files(test_tmpdir()));
}

/* A path that exists and is not a regular file is written in place: a FIFO
 * stays a FIFO, and its reader gets the bytes. (No real device file here:
 * a wrong rename as root would replace it.) */
TEST(common_write_file_atomic_fifo_in_place) {
    const char *fifo = test_path("pipe.json");
    REQUIRE(mkfifo(fifo, 0600) == 0);
    static const char TEXT[] = "{\"a\": 1}\n";
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        alarm(20); /* never hang the suite */
        FILE *f = fopen(fifo, "rb");
        char buf[64];
        size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
        _exit(f && n == sizeof TEXT - 1 && memcmp(buf, TEXT, n) == 0 ? 0 : 1);
    }
    dtx_status st = dtx_write_file_atomic(fifo, TEXT, sizeof TEXT - 1);
    CHECKF(st == DTX_OK, "%s", dtx_last_error());
    int ws = 0;
    if (st != DTX_OK) kill(pid, SIGKILL);
    REQUIRE(waitpid(pid, &ws, 0) == pid);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    struct stat sb;
    CHECK(stat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode));
    CHECK(test_no_temp_files(test_tmpdir()));
}

TEST(common_map_file) {
    const char *p = test_path("map.bin");
    REQUIRE(write_file(p, "hello", 5) == 0);
    dtx_mapped m;
    REQUIRE(dtx_map_file(p, "cannot open", &m) == DTX_OK);
    CHECK(m.size == 5 && m.data && memcmp(m.data, "hello", 5) == 0 && m.heap); /* small: read */
    dtx_unmap_file(&m);
    CHECK(m.data == NULL && m.size == 0);
    dtx_unmap_file(&m); /* twice is fine */
    /* at DTX_MAP_READ_BELOW bytes and above: mapped, the same bytes */
    size_t big = DTX_MAP_READ_BELOW;
    unsigned char *bytes = malloc(big);
    REQUIRE(bytes);
    for (size_t i = 0; i < big; i++) bytes[i] = (unsigned char)(i * 131 + 7);
    const char *bp = test_path("map-big.bin");
    REQUIRE(write_file(bp, bytes, big) == 0 && write_file(p, bytes, big - 1) == 0);
    REQUIRE(dtx_map_file(bp, "cannot open", &m) == DTX_OK);
    CHECK(m.size == big && !m.heap && memcmp(m.data, bytes, big) == 0);
    dtx_unmap_file(&m);
    REQUIRE(dtx_map_file(p, "cannot open", &m) == DTX_OK);
    CHECK(m.size == big - 1 && m.heap && memcmp(m.data, bytes, big - 1) == 0);
    dtx_unmap_file(&m);
    free(bytes);
    /* an empty file: no mapping */
    const char *e = test_path("empty.bin");
    REQUIRE(write_file(e, "", 0) == 0);
    CHECK(dtx_map_file(e, "cannot open", &m) == DTX_OK && m.data == NULL && m.size == 0);
    /* refusals */
    CHECK(dtx_map_file(test_path("absent.bin"), "cannot open", &m) == DTX_ERR_IO && m.data == NULL &&
          strstr(dtx_last_error(), "absent.bin: cannot open: No such file"));
    CHECK(dtx_map_file(test_path("absent.bin"), NULL, &m) == DTX_ERR_IO &&
          strstr(dtx_last_error(), "absent.bin: No such file"));
    CHECK(dtx_map_file(test_tmpdir(), "cannot open", &m) == DTX_ERR_IO && strstr(dtx_last_error(), "not a regular file"));
    const char *fifo = test_path("map.fifo");
    REQUIRE(mkfifo(fifo, 0600) == 0);
    CHECK(dtx_map_file(fifo, "cannot open", &m) == DTX_ERR_IO && strstr(dtx_last_error(), "not a regular file")); /* no hang */
}

/* dtx_release_zero: the range reads as zero, the bytes around it are kept,
 * and the whole pages inside it are no longer resident (mincore). */
TEST(common_release_zero) {
    long pg = sysconf(_SC_PAGESIZE);
    REQUIRE(pg > 0);
    size_t n = 64 * (size_t)pg;
    unsigned char *p = dtx_alloc(n, 1);
    REQUIRE(p != NULL);
    memset(p, 0xAB, n);
    size_t a = 100, b = n - 100; /* not page-aligned at either end */
    dtx_release_zero(p + a, b - a);
    int zero = 1, kept = 1;
    for (size_t i = a; i < b; i++) zero &= p[i] == 0;
    for (size_t i = 0; i < a; i++) kept &= p[i] == 0xAB;
    for (size_t i = b; i < n; i++) kept &= p[i] == 0xAB;
    CHECK(zero && kept);
    /* reading the range back made it resident again (zero pages): release it once more, then ask */
    dtx_release_zero(p + a, b - a);
    uintptr_t first = ((uintptr_t)(p + a) + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
    uintptr_t last = ((uintptr_t)(p + b)) & ~((uintptr_t)pg - 1);
    REQUIRE(last > first);
    size_t pages = (last - first) / (size_t)pg;
    unsigned char *vec = malloc(pages);
    REQUIRE(vec != NULL);
    REQUIRE(mincore((void *)first, last - first, vec) == 0);
    size_t resident = 0;
    for (size_t i = 0; i < pages; i++) resident += vec[i] & 1;
    CHECKF(resident == 0, "%zu of %zu released pages are still resident", resident, pages);
    free(vec);
    free(p);
}

/* dtx_version is the header's version; every status has its own name; a
 * failure's status is kept beside its message. */
TEST(common_version_and_status) {
    char want[32];
    snprintf(want, sizeof want, "%d.%d", DTX_VERSION_MAJOR, DTX_VERSION_MINOR);
    CHECK(strcmp(dtx_version(), want) == 0);
    const char *names[DTX_ERR_NUMERIC + 1];
    for (int s = 0; s <= DTX_ERR_NUMERIC; s++) {
        names[s] = dtx_status_name((dtx_status)s);
        CHECK(strcmp(names[s], "unknown status") != 0);
        for (int r = 0; r < s; r++) CHECK(strcmp(names[r], names[s]) != 0);
    }
    CHECK(strcmp(dtx_status_name(DTX_ERR_NUMERIC), "numeric error") == 0);
    CHECK(dtx_fail(DTX_ERR_FORMAT, "x") == DTX_ERR_FORMAT && dtx_last_status() == DTX_ERR_FORMAT);
    dtx_clear_error();
    CHECK(dtx_last_status() == DTX_OK && dtx_last_error()[0] == '\0');
}

/* dtx_first_bad_block over several blocks and threads: the first flagged
 * block wherever it lies (first, middle, the short last one), SIZE_MAX for
 * none; and the 4-bit format's check built on it names the exact byte. */
static int any_nonzero(const void *v, size_t lo, size_t hi) {
    const uint8_t *b = v;
    for (size_t i = lo; i < hi; i++)
        if (b[i]) return 1;
    return 0;
}

TEST(common_first_bad_block) {
    enum { N = 1000003, BLOCK = 4096 };
    uint8_t *v = calloc(N, 1);
    REQUIRE(v);
    CHECK(dtx_first_bad_block(v, N, BLOCK, any_nonzero) == SIZE_MAX);
    CHECK(dtx_first_bad_block(v, 0, BLOCK, any_nonzero) == SIZE_MAX);
    const size_t at[] = {0, 4095, 4096, 500000, N - 1};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        v[at[i]] = 1;
        v[N - 2] = 1; /* a later one too: the first still wins */
        CHECKF(dtx_first_bad_block(v, N, BLOCK, any_nonzero) == (at[i] < N - 2 ? at[i] / BLOCK : (size_t)(N - 2) / BLOCK),
               "flag at %zu", at[i]);
        memset(v, 0, N);
    }
    v[17] = 1;
    CHECK(dtx_first_bad_block(v, 100, BLOCK, any_nonzero) == 0); /* one short block */
    free(v);
}
