/* difftx tokenizer: train a byte-level BPE tokenizer, encode, decode, and
 * describe tokenizer files (docs/tokenizer.md). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/flags.h"
#include "difftx.h"

int cmd_tokenizer(int argc, char **argv);

static const char USAGE[] =
    "usage: difftx tokenizer <train|encode|decode|info> [flags]\n"
    "\n"
    "Byte-level BPE (docs/tokenizer.md). A tokenizer file is ours (difftx tokenizer\n"
    "train), a tiktoken rank file such as data/tiktoken/cl100k_base.tiktoken (it\n"
    "encodes exactly as tiktoken does), a Hugging Face tokenizer.json (as their\n"
    "tokenizers library does) or a SentencePiece tokenizer.model (as sentencepiece\n"
    "does), told apart by content; a Hugging Face folder gives its own.\n"
    "\n"
    "  train   --input FILE_OR_DIR [--input ...] [--vocab-size N] --out FILE\n"
    "  encode  --tokenizer FILE [--text S | --input FILE] [--special]   (ids on stdout)\n"
    "  decode  --tokenizer FILE [--ids \"1 2 3\" | --input FILE]          (bytes on stdout)\n"
    "  info    [--json] FILE\n"
    "\n"
    "'difftx tokenizer <sub> --help' describes each.\n";

static const char USAGE_TRAIN[] =
    "usage: difftx tokenizer train --input FILE_OR_DIR [--input ...] [--vocab-size N] --out FILE\n"
    "\n"
    "Trains a byte-level BPE tokenizer on the inputs (a folder: every file under it,\n"
    "in name order, skipping names that begin with '.'). The vocabulary is the 256\n"
    "byte tokens (ids 0-255), then one token per merge, then <|bos|>, <|eos|> and\n"
    "<|pad|>; it is smaller than asked when no pair of tokens occurs twice any more.\n"
    "The same inputs always give the same file.\n"
    "\n";

static const char USAGE_ENCODE[] =
    "usage: difftx tokenizer encode --tokenizer FILE [--text S | --input FILE] [--special] [--stats]\n"
    "\n"
    "Encodes the text (the bytes of S, of FILE, or of stdin) and prints the token ids\n"
    "on one line, separated by spaces: a token file for 'difftx train --tokens'.\n"
    "\n";

static const char USAGE_DECODE[] =
    "usage: difftx tokenizer decode --tokenizer FILE [--ids \"1 2 3\" | --input FILE]\n"
    "\n"
    "Writes the bytes of the tokens (whitespace-separated ids from --ids, FILE or\n"
    "stdin) to stdout, exactly: decode(encode(x)) is x for any bytes x.\n"
    "\n";

static const char USAGE_INFO[] =
    "usage: difftx tokenizer info [--json] FILE\n"
    "\n"
    "Describes a tokenizer file: where it comes from (difftx or tiktoken), the\n"
    "vocabulary size, the ordinary tokens, the special tokens and their ids.\n"
    "\n";


/* The whole of f (binary); NULL with a message on failure. */
static char *read_stream(const char *cmd, FILE *f, const char *name, size_t *len) {
    char *b;
    if (dtx_read_stream(f, name, &b, len) != DTX_OK) {
        runtime_error(cmd, "%s", dtx_last_error());
        return NULL;
    }
    return b;
}

/* --text, --input FILE or stdin. */
static char *read_input(const char *cmd, const char *text, const char *path, size_t *len) {
    if (text) {
        *len = strlen(text);
        char *b = malloc(*len + 1);
        if (b) memcpy(b, text, *len + 1);
        else runtime_error(cmd, "out of memory");
        return b;
    }
    if (!path) return read_stream(cmd, stdin, "stdin", len);
    FILE *f = dtx_fopen_read(path);
    if (!f) {
        runtime_error(cmd, "%s", dtx_last_error());
        return NULL;
    }
    char *b = read_stream(cmd, f, path, len);
    fclose(f);
    return b;
}

static dtx_tokenizer *load(const char *cmd, const char *path) {
    dtx_tokenizer *t = NULL;
    if (dtx_tokenizer_load(&t, path) != DTX_OK) {
        lib_error(cmd);
        return NULL;
    }
    return t;
}

/* Takes every "--name VALUE" / "--name=VALUE" out of argv (flags_parse
 * keeps only the last of a repeated flag, and refuses empty values):
 * values[] gets them in order, rest[] the other arguments. Returns -1, or
 * the exit code after a usage error. */
static int take_flag(const char *cmd, const char *name, int allow_empty, int argc, char **argv, const char **values,
                     int *n_values, char **rest, int *n_rest) {
    size_t nl = strlen(name);
    *n_values = *n_rest = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = NULL;
        if (i > 0 && strcmp(a, name) == 0) {
            if (i + 1 >= argc || (argv[i + 1][0] == '-' && argv[i + 1][1] == '-' && argv[i + 1][2]))
                return usage_error(cmd, "%s: missing value", name);
            v = argv[++i];
        } else if (i > 0 && strncmp(a, name, nl) == 0 && a[nl] == '=') {
            v = a + nl + 1;
        } else {
            rest[(*n_rest)++] = argv[i];
            continue;
        }
        if (!v[0] && !allow_empty) return usage_error(cmd, "%s: expected a non-empty value, got ''", name);
        values[(*n_values)++] = v;
    }
    return -1;
}

/* ------------------------------------------------------------ train */

static int sub_train(int argc, char **argv) {
    const char *cmd = "tokenizer train";
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!inputs || !rest) {
        free(inputs);
        free(rest);
        return runtime_error(cmd, "out of memory");
    }
    int n_in = 0, n_rest = 0;
    int rc = take_flag(cmd, "--input", 0, argc, argv, inputs, &n_in, rest, &n_rest);
    int64_t vocab = DTX_TOKENIZER_DEFAULT_VOCAB;
    const char *out = NULL;
    flag fl[] = {
        FLAG_INPUTS_TEXT,
        FLAG_INT("--vocab-size", &vocab, 259, 1 << 24, .metavar = "N",
                 .help = "tokens in all, specials included (at least 259)"),
        FLAG_STR("--out", &out, .metavar = "FILE", .help = "where to write the tokenizer [required]"),
    };
    if (rc < 0) {
        switch (flags_parse(cmd, USAGE_TRAIN, fl, (int)(sizeof fl / sizeof fl[0]), n_rest, rest, NULL, 0, NULL)) {
        case FLAGS_HELP: rc = finish_stdout(cmd); break;
        case FLAGS_ERROR: rc = EXIT_USAGE; break;
        }
    }
    if (rc < 0 && n_in == 0) rc = usage_error(cmd, "--input is required (a text file or a folder)");
    if (rc < 0 && !out) rc = usage_error(cmd, "--out is required");
    if (rc < 0) {
        double t0 = dtx_now_s();
        dtx_tokenizer *t = NULL;
        if (dtx_tokenizer_train(&t, inputs, n_in, vocab) != DTX_OK) {
            rc = lib_error(cmd);
        } else {
            double secs = dtx_now_s() - t0;
            if (dtx_tokenizer_save(t, out) != DTX_OK) {
                rc = lib_error(cmd);
            } else {
                int64_t v = dtx_tokenizer_vocab_size(t), ord = dtx_tokenizer_num_ordinary(t);
                printf("trained %lld tokens (256 bytes, %lld merges, %d specials) in %.2f s%s\nsaved %s\n", (long long)v,
                       (long long)(ord - 256), dtx_tokenizer_num_special(t), secs,
                       v < vocab ? " (stopped early: no pair of tokens occurs twice any more)" : "", out);
                rc = finish_stdout(cmd);
            }
            dtx_tokenizer_free(t);
        }
    }
    free(inputs);
    free(rest);
    return rc;
}

/* ------------------------------------------------------------ encode */

static int write_ids(const char *cmd, const int32_t *ids, int64_t n) {
    char buf[1 << 16];
    size_t o = 0;
    for (int64_t i = 0; i < n; i++) {
        if (o + 16 > sizeof buf) {
            if (fwrite(buf, 1, o, stdout) != o) return runtime_error(cmd, "error writing to stdout");
            o = 0;
        }
        if (i) buf[o++] = ' ';
        char tmp[12];
        int k = 0;
        uint32_t v = (uint32_t)ids[i];
        do tmp[k++] = (char)('0' + v % 10); while ((v /= 10));
        while (k) buf[o++] = tmp[--k];
    }
    buf[o++] = '\n';
    if (fwrite(buf, 1, o, stdout) != o) return runtime_error(cmd, "error writing to stdout");
    return finish_stdout(cmd);
}

static int sub_encode(int argc, char **argv) {
    const char *cmd = "tokenizer encode";
    const char *tok = NULL, *text = NULL, *input = NULL;
    int special = 0, stats = 0;
    flag fl[] = {
        FLAG_TOKENIZER_FILE(&tok),
        FLAG_TEXT("  --text S              the text itself\n"),
        FLAG_STR("--input", &input, .metavar = "FILE", .help = "read the text from FILE (default: stdin)"),
        FLAG_BOOL("--special", &special, 1,
                  .help = "special-token text (\"<|eos|>\") becomes its id; without it, it is encoded as plain text"),
        FLAG_BOOL("--stats", &stats, 1, .help = "also print bytes, tokens and speed on stderr"),
    };
    /* --text may be empty, which flags_parse refuses: take it out first. */
    const char **texts = calloc((size_t)argc + 1, sizeof *texts);
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!texts || !rest) {
        free(texts);
        free(rest);
        return runtime_error(cmd, "out of memory");
    }
    int n_text = 0, n_rest = 0;
    int pr = take_flag(cmd, "--text", 1, argc, argv, texts, &n_text, rest, &n_rest);
    if (pr < 0) {
        switch (flags_parse(cmd, USAGE_ENCODE, fl, (int)(sizeof fl / sizeof fl[0]), n_rest, rest, NULL, 0, NULL)) {
        case FLAGS_HELP: pr = finish_stdout(cmd); break;
        case FLAGS_ERROR: pr = EXIT_USAGE; break;
        }
    }
    if (n_text) text = texts[n_text - 1];
    free(texts);
    free(rest);
    if (pr >= 0) return pr;
    if (text && input) return usage_error(cmd, "--text and --input: give one of them");
    dtx_tokenizer *t = load(cmd, tok);
    if (!t) return EXIT_RUNTIME;
    size_t len = 0;
    char *buf = read_input(cmd, text, input, &len);
    if (!buf) {
        dtx_tokenizer_free(t);
        return EXIT_RUNTIME;
    }
    int32_t *ids = NULL;
    int64_t n = 0;
    double t0 = dtx_now_s();
    int rc;
    if (dtx_tokenizer_encode(t, buf, len, special ? DTX_ENCODE_SPECIAL : DTX_ENCODE_ORDINARY, &ids, &n) != DTX_OK) {
        rc = lib_error(cmd);
    } else {
        double secs = dtx_now_s() - t0;
        if (stats)
            fprintf(stderr, "%zu bytes -> %lld tokens (%.3f bytes/token) in %.3f s, %.1f MB/s\n", len, (long long)n,
                    n ? (double)len / (double)n : 0.0, secs, secs > 0 ? len / secs / 1e6 : 0.0);
        rc = write_ids(cmd, ids, n);
    }
    free(ids);
    free(buf);
    dtx_tokenizer_free(t);
    return rc;
}

/* ------------------------------------------------------------ decode */

/* Whitespace-separated ids; on a bad one, a message naming it. from_flag
 * decides usage (exit 2) or runtime (exit 1) errors. */
static int parse_ids(const char *cmd, const char *src, const char *s, size_t len, int from_flag, int32_t **out,
                     int64_t *n_out) {
    int32_t *ids = malloc((len / 2 + 1) * sizeof *ids);
    if (!ids) return runtime_error(cmd, "out of memory");
    int64_t n = 0;
    size_t i = 0;
    while (i < len) {
        if (isspace((unsigned char)s[i])) {
            i++;
            continue;
        }
        size_t st = i;
        while (i < len && !isspace((unsigned char)s[i])) i++;
        int ok = i - st <= 10;
        int64_t v = 0;
        for (size_t j = st; ok && j < i; j++) {
            if (s[j] < '0' || s[j] > '9') ok = 0;
            else v = v * 10 + (s[j] - '0');
        }
        if (!ok || v > INT32_MAX) {
            free(ids);
            int w = (int)(i - st > 20 ? 20 : i - st);
            if (from_flag)
                return usage_error(cmd, "--ids: token %lld '%.*s' is not a non-negative integer id", (long long)n, w, s + st);
            return runtime_error(cmd, "%s: token %lld '%.*s' is not a non-negative integer id", src, (long long)n, w, s + st);
        }
        ids[n++] = (int32_t)v;
    }
    *out = ids;
    *n_out = n;
    return EXIT_OK;
}

static int sub_decode(int argc, char **argv) {
    const char *cmd = "tokenizer decode";
    const char *tok = NULL, *ids_s = NULL, *input = NULL;
    flag fl[] = {
        FLAG_TOKENIZER_FILE(&tok),
        FLAG_STR("--ids", &ids_s, .metavar = "\"I J ...\"", .help = "the ids"),
        FLAG_STR("--input", &input, .metavar = "FILE", .help = "read the ids from FILE (default: stdin)"),
    };
    switch (flags_parse(cmd, USAGE_DECODE, fl, (int)(sizeof fl / sizeof fl[0]), argc, argv, NULL, 0, NULL)) {
    case FLAGS_HELP: return finish_stdout(cmd);
    case FLAGS_ERROR: return EXIT_USAGE;
    }
    if (ids_s && input) return usage_error(cmd, "--ids and --input: give one of them");
    int32_t *ids = NULL;
    int64_t n = 0;
    int rc;
    if (ids_s) {
        if ((rc = parse_ids(cmd, "--ids", ids_s, strlen(ids_s), 1, &ids, &n))) return rc;
    }
    dtx_tokenizer *t = load(cmd, tok);
    if (!t) {
        free(ids);
        return EXIT_RUNTIME;
    }
    if (!ids_s) {
        size_t len;
        char *buf = read_input(cmd, NULL, input, &len);
        if (!buf) {
            dtx_tokenizer_free(t);
            return EXIT_RUNTIME;
        }
        rc = parse_ids(cmd, input ? input : "stdin", buf, len, 0, &ids, &n);
        free(buf);
        if (rc) {
            dtx_tokenizer_free(t);
            return rc;
        }
    }
    char *text = NULL;
    size_t len = 0;
    if (dtx_tokenizer_decode(t, ids, n, &text, &len) != DTX_OK) rc = lib_error(cmd);
    else if (fwrite(text, 1, len, stdout) != len) rc = runtime_error(cmd, "error writing to stdout");
    else rc = finish_stdout(cmd);
    free(text);
    free(ids);
    dtx_tokenizer_free(t);
    return rc;
}

/* ------------------------------------------------------------ info */

static int sub_info(int argc, char **argv) {
    const char *cmd = "tokenizer info";
    int json = 0;
    flag fl[] = {FLAG_BOOL("--json", &json, 1, .help = "one JSON object instead of text")};
    const char *pos[1];
    int n_pos = 0;
    switch (flags_parse(cmd, USAGE_INFO, fl, (int)(sizeof fl / sizeof fl[0]), argc, argv, pos, 1, &n_pos)) {
    case FLAGS_HELP: return finish_stdout(cmd);
    case FLAGS_ERROR: return EXIT_USAGE;
    }
    if (n_pos == 0) return usage_error(cmd, "expected a tokenizer file (see 'difftx tokenizer info --help')");
    dtx_tokenizer *t = load(cmd, pos[0]);
    if (!t) return EXIT_RUNTIME;
    char *text = dtx_tokenizer_describe(t, pos[0], json);
    dtx_tokenizer_free(t);
    if (!text) return runtime_error(cmd, "out of memory building the report");
    fputs(text, stdout);
    free(text);
    return finish_stdout(cmd);
}

/* ------------------------------------------------------------ dispatch */

int cmd_tokenizer(int argc, char **argv) {
    if (argc < 2) {
        fputs(USAGE, stderr);
        return EXIT_USAGE;
    }
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0) {
        fputs(USAGE, stdout);
        return finish_stdout("tokenizer");
    }
    if (strcmp(sub, "train") == 0) return sub_train(argc - 1, argv + 1);
    if (strcmp(sub, "encode") == 0) return sub_encode(argc - 1, argv + 1);
    if (strcmp(sub, "decode") == 0) return sub_decode(argc - 1, argv + 1);
    if (strcmp(sub, "info") == 0) return sub_info(argc - 1, argv + 1);
    return usage_error("tokenizer", "unknown subcommand '%s' (train, encode, decode or info; see 'difftx tokenizer --help')",
                       sub);
}
