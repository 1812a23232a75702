/* difftx prepare: text files -> one token shard (docs/data.md).
 *
 * Each input file is one document, encoded on its own with the tokenizer
 * (special-token text in the files is plain text). Documents follow each
 * other in the order of the inputs, a folder standing for every regular file
 * under it in byte order of names (names beginning with '.' skipped), as
 * `difftx tokenizer train` reads them. With --append-eos every document is
 * followed by the tokenizer's EOS (dtx_tokenizer_eos: <|eos|> or
 * <|endoftext|>, a Hugging Face eos_token, SentencePiece's </s>). The shard is
 * written atomically (temporary file, fsync, rename). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli/flags.h"
#include "difftx.h"

int cmd_prepare(int argc, char **argv);

static const char *CMD = "prepare";

static const char USAGE[] =
    "usage: difftx prepare --tokenizer FILE --input FILE_OR_DIR [--input ...] --out SHARD.bin [--append-eos]\n"
    "\n"
    "Encodes text files into one token shard (docs/data.md): a 64-byte header\n"
    "(magic DTXTOKS, version, token width, vocab_size, token count, eos id,\n"
    "documents), then the ids, 2 bytes each for vocabularies up to 65536, else 4.\n"
    "Each file is one document, encoded on its own; special-token text inside it\n"
    "is plain text. A folder stands for every regular file under it, in byte\n"
    "order of names, skipping names that begin with '.'. The shard is written\n"
    "atomically; 'difftx score --tokens' and the training loader read it.\n"
    "\n";


/* ------------------------------------------------------------ inputs */

typedef dtx_paths strlist;

static int push(strlist *l, char *s) {
    if (!s) return -1;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **nv = realloc(l->v, cap * sizeof *nv);
        if (!nv) {
            free(s);
            return -1;
        }
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = s;
    return 0;
}

/* Appends the files an --input names (dtx_paths_add: what "a folder" means).
 * The output file, when it exists already, must not be among them. Returns
 * 0, or the exit code after a message. */
static int collect(const char *path, const struct stat *out_st, strlist *files) {
    size_t before = files->n;
    if (dtx_paths_add(files, path) != DTX_OK) return lib_error(CMD);
    if (files->n == before) return runtime_error(CMD, "%s: a folder with no files in it", path);
    struct stat sb;
    for (size_t i = before; out_st && i < files->n; i++)
        if (stat(files->v[i], &sb) == 0 && sb.st_dev == out_st->st_dev && sb.st_ino == out_st->st_ino)
            return runtime_error(CMD, "%s: this input is the output file (--out)", files->v[i]);
    return 0;
}

/* The whole file; NULL after a message. */
static char *slurp(const char *path, size_t *len) {
    char *b;
    if (dtx_read_file(path, &b, len) != DTX_OK) {
        runtime_error(CMD, "%s", dtx_last_error());
        return NULL;
    }
    return b;
}

/* ------------------------------------------------------------ encoding */

typedef struct {
    char *text;
    size_t len;
    int32_t *ids;
    int64_t n;
    dtx_status st;
    char err[512]; /* the encoding thread's dtx_last_error() */
} doc;

/* Files are read and encoded in chunks of at most this many bytes (or
 * CHUNK_FILES files), in parallel within a chunk, and written in order. */
enum { CHUNK_FILES = 256 };
static const size_t CHUNK_BYTES = (size_t)256 << 20;

typedef struct {
    int64_t docs, tokens;
    size_t bytes;
    double encode_s;
} totals;

static int encode_all(const dtx_tokenizer *t, const strlist *files, dtx_shard_writer *w, totals *tot) {
    doc *docs = calloc(CHUNK_FILES, sizeof *docs);
    if (!docs) return runtime_error(CMD, "out of memory");
    int rc = 0;
    for (size_t f0 = 0; f0 < files->n && !rc;) {
        /* read a chunk */
        size_t nd = 0, bytes = 0;
        while (f0 + nd < files->n && nd < CHUNK_FILES && (nd == 0 || bytes < CHUNK_BYTES)) {
            doc *d = &docs[nd];
            memset(d, 0, sizeof *d);
            if (!(d->text = slurp(files->v[f0 + nd], &d->len))) {
                rc = EXIT_RUNTIME;
                break;
            }
            bytes += d->len;
            nd++;
        }
        /* encode it */
        double t0 = dtx_now_s();
        if (!rc) {
#pragma omp parallel for schedule(dynamic, 1)
            for (long i = 0; i < (long)nd; i++) {
                doc *d = &docs[i];
                d->st = dtx_tokenizer_encode(t, d->text, d->len, DTX_ENCODE_ORDINARY, &d->ids, &d->n);
                if (d->st) snprintf(d->err, sizeof d->err, "%s", dtx_last_error());
            }
        }
        tot->encode_s += dtx_now_s() - t0;
        /* write it, in order */
        for (size_t i = 0; i < nd && !rc; i++) {
            doc *d = &docs[i];
            if (d->st) {
                rc = runtime_error(CMD, "%s: %s", files->v[f0 + i], d->err);
                break;
            }
            /* end_document appends the eos only when the writer has one */
            if (dtx_shard_writer_append(w, d->ids, d->n) != DTX_OK || dtx_shard_writer_end_document(w) != DTX_OK) {
                rc = lib_error(CMD);
                break;
            }
            tot->docs++;
            tot->bytes += d->len;
        }
        for (size_t i = 0; i < nd; i++) {
            free(docs[i].text);
            free(docs[i].ids);
            docs[i].text = NULL;
            docs[i].ids = NULL;
        }
        f0 += nd;
    }
    free(docs);
    tot->tokens = dtx_shard_writer_count(w);
    return rc;
}

/* ------------------------------------------------------------ command */

/* Takes every "--input VALUE" / "--input=VALUE" out of argv (flags_parse
 * keeps only the last of a repeated flag). Returns -1, or the exit code of a
 * usage error. */
static int take_inputs(int argc, char **argv, strlist *inputs, char **rest, int *n_rest) {
    static const char name[] = "--input";
    const size_t nl = sizeof name - 1;
    *n_rest = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (i > 0 && strcmp(a, name) == 0) {
            if (i + 1 >= argc || (argv[i + 1][0] == '-' && argv[i + 1][1] == '-' && argv[i + 1][2]))
                return usage_error(CMD, "--input: missing value");
            v = argv[++i];
        } else if (i > 0 && strncmp(a, name, nl) == 0 && a[nl] == '=') {
            v = a + nl + 1;
        } else {
            rest[(*n_rest)++] = argv[i];
            continue;
        }
        if (!v[0]) return usage_error(CMD, "--input: expected a file or a folder, got ''");
        if (push(inputs, strdup(v))) return runtime_error(CMD, "out of memory");
    }
    return -1;
}

static int run(const char *tok_path, const strlist *inputs, const char *out, int append_eos) {
    double t_start = dtx_now_s();
    dtx_tokenizer *t = NULL;
    if (dtx_tokenizer_load(&t, tok_path) != DTX_OK) return lib_error(CMD);
    int32_t eos = -1;
    const char *eos_name = NULL; /* its bytes, not NUL-terminated */
    size_t nl = 0;
    if (append_eos) {
        eos = dtx_tokenizer_eos(t);
        eos_name = eos >= 0 ? dtx_tokenizer_token_bytes(t, eos, &nl) : NULL;
        if (eos < 0) {
            dtx_tokenizer_free(t);
            return runtime_error(CMD, "%s: the tokenizer has no end-of-text token (<|eos|>, <|endoftext|>, its "
                                 "eos_token) for --append-eos", tok_path);
        }
    }
    struct stat out_st;
    int have_out = stat(out, &out_st) == 0;
    strlist files = {0};
    int rc = 0;
    for (size_t i = 0; i < inputs->n && !rc; i++) rc = collect(inputs->v[i], have_out ? &out_st : NULL, &files);
    dtx_shard_writer *w = NULL;
    if (!rc && dtx_shard_writer_open(&w, out, dtx_tokenizer_vocab_size(t), eos) != DTX_OK) rc = lib_error(CMD);
    totals tot = {0};
    if (!rc) rc = encode_all(t, &files, w, &tot);
    if (!rc && tot.bytes == 0) /* an empty shard trains nothing and fails later, far from the cause */
        rc = runtime_error(CMD, "%s%s: no text to encode (%zu file%s, all empty); nothing written", inputs->v[0],
                           inputs->n > 1 ? " ..." : "", files.n, files.n == 1 ? "" : "s");
    if (w) {
        if (rc) dtx_shard_writer_abort(w);
        else if (dtx_shard_writer_commit(w) != DTX_OK) rc = lib_error(CMD);
    }
    if (!rc) {
        int64_t vocab = dtx_tokenizer_vocab_size(t);
        int width = vocab <= 65536 ? 2 : 4;
        int threads = 1;
#ifdef _OPENMP
        threads = omp_get_max_threads();
#endif
        double total_s = dtx_now_s() - t_start;
        char eos_note[64] = "";
        if (eos_name) snprintf(eos_note, sizeof eos_note, ", each ended by %.*s = %ld", (int)nl, eos_name, (long)eos);
        printf("%lld document%s, %zu bytes -> %lld tokens (%.3f bytes/token)%s\n", (long long)tot.docs,
               tot.docs == 1 ? "" : "s", tot.bytes, (long long)tot.tokens,
               tot.tokens ? (double)tot.bytes / (double)tot.tokens : 0.0, eos_note);
        printf("wrote %s: %lld bytes (%d-byte header + %lld tokens x %d bytes), vocab_size %lld\n", out,
               (long long)(DTX_SHARD_HEADER_SIZE + tot.tokens * width), DTX_SHARD_HEADER_SIZE, (long long)tot.tokens,
               width, (long long)vocab);
        printf("encoded in %.3f s (%.1f MB/s, %d thread%s); %.3f s in all (%.1f MB/s)\n", tot.encode_s,
               tot.encode_s > 0 ? (double)tot.bytes / tot.encode_s / 1e6 : 0.0, threads, threads == 1 ? "" : "s",
               total_s, total_s > 0 ? (double)tot.bytes / total_s / 1e6 : 0.0);
        rc = finish_stdout(CMD);
    }
    dtx_paths_free(&files);
    dtx_tokenizer_free(t);
    return rc;
}

int cmd_prepare(int argc, char **argv) {
    strlist inputs = {0};
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return runtime_error(CMD, "out of memory");
    int n_rest = 0;
    int rc = take_inputs(argc, argv, &inputs, rest, &n_rest);
    const char *tok = NULL, *out = NULL;
    int append_eos = 0;
    flag fl[] = {
        FLAG_TOKENIZER_FILE(&tok),
        FLAG_INPUTS_TEXT,
        FLAG_STR("--out", &out, .metavar = "FILE", .help = "the shard to write [required]"),
        FLAG_BOOL("--append-eos", &append_eos, 1,
                  .help = "end every document with the tokenizer's EOS (<|eos|>, <|endoftext|>, eos_token, </s>); "
                          "without it documents are concatenated"),
    };
    if (rc < 0) {
        switch (flags_parse(CMD, USAGE, fl, (int)(sizeof fl / sizeof fl[0]), n_rest, rest, NULL, 0, NULL)) {
        case FLAGS_HELP: rc = finish_stdout(CMD); break;
        case FLAGS_ERROR: rc = EXIT_USAGE; break;
        }
    }
    if (rc < 0 && !tok) rc = usage_error(CMD, "--tokenizer is required");
    if (rc < 0 && inputs.n == 0) rc = usage_error(CMD, "--input is required (a text file or a folder)");
    if (rc < 0 && !out) rc = usage_error(CMD, "--out is required");
    if (rc < 0) rc = run(tok, &inputs, out, append_eos);
    dtx_paths_free(&inputs);
    free(rest);
    return rc;
}
