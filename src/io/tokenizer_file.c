/* Tokenizer files (docs/tokenizer.md): our text format and tiktoken rank
 * files, both parsed strictly; every refusal names the file and line. The
 * loader also tells a Hugging Face tokenizer.json (tokenizer_hf.c) and a
 * SentencePiece model (tokenizer_spm.c) apart from these by content. */
#include <errno.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/tokenizer.h"

#define MAGIC "difftx-tokenizer"
#define VERSION 1
#define CL100K_RANKS 100256

/* ------------------------------------------------------------ base64 */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t dtx_b64_len(size_t n) { return (n + 2) / 3 * 4; }

void dtx_b64_encode(const uint8_t *in, size_t n, char *out) {
    size_t i = 0, o = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = B64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = '=';
    }
}

static int b64_val(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

int64_t dtx_b64_decode(const char *s, size_t n, uint8_t *out) {
    if (n == 0 || n % 4) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int last = i + 4 == n;
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            char c = s[i + k];
            if (c == '=' && last && k >= 2) {
                v[k] = 0;
                pad++;
                continue;
            }
            if (pad) return -1; /* data after padding */
            if ((v[k] = b64_val(c)) < 0) return -1;
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2) out[o++] = (uint8_t)(w >> 8);
        if (pad < 1) out[o++] = (uint8_t)w;
        /* canonical: the bits under the padding are zero */
        if ((pad == 1 && (w & 0xff)) || (pad == 2 && (w & 0xffff))) return -1;
    }
    return (int64_t)o;
}

/* ------------------------------------------------------------ reading */


typedef struct {
    const char *path;
    const char *buf;
    size_t len, pos;
    int64_t line;   /* 1-based number of the line last returned */
    const char *s;  /* that line, without its '\n' */
    size_t n;
    int had_nl;
} cursor;

/* The next line; 0 at the end of the file. */
static int next_line(cursor *c) {
    if (c->pos >= c->len) return 0;
    const char *start = c->buf + c->pos;
    const char *nl = memchr(start, '\n', c->len - c->pos);
    c->s = start;
    c->n = nl ? (size_t)(nl - start) : c->len - c->pos;
    c->had_nl = nl != NULL;
    c->pos += c->n + (nl != NULL);
    c->line++;
    return 1;
}

__attribute__((format(printf, 2, 3))) static dtx_status bad(const cursor *c, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dtx_fail(DTX_ERR_FORMAT, "%s:%lld: %s", c->path, (long long)c->line, msg);
}

/* The library's message of the last failure, prefixed with file and line. */
static dtx_status bad_lib(const cursor *c, dtx_status st) {
    if (st == DTX_ERR_NOMEM) return st;
    char msg[384];
    snprintf(msg, sizeof msg, "%s", dtx_last_error());
    return dtx_fail(st, "%s:%lld: %s", c->path, (long long)c->line, msg);
}

/* A short, printable quote of the current line for messages. */
static const char *quote(const cursor *c, char *buf, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < c->n && o + 5 < cap; i++) {
        unsigned char ch = (unsigned char)c->s[i];
        if (i == 40) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (ch >= 0x20 && ch < 0x7f) buf[o++] = (char)ch;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", ch);
    }
    buf[o] = '\0';
    return buf;
}

/* A decimal in [0, 10^9): no sign, no leading zeros. */
static int parse_uint(const char *s, size_t n, int64_t *out) {
    if (n == 0 || n > 9 || (n > 1 && s[0] == '0')) return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

/* "KEY VALUE" with VALUE a number. */
static dtx_status header_num(cursor *c, const char *key, int64_t *out) {
    char q[256];
    if (!next_line(c)) return bad(c, "the file ends before the '%s' line", key);
    size_t k = strlen(key);
    if (c->n <= k + 1 || memcmp(c->s, key, k) != 0 || c->s[k] != ' ')
        return bad(c, "expected '%s N', got '%s'", key, quote(c, q, sizeof q));
    if (parse_uint(c->s + k + 1, c->n - k - 1, out))
        return bad(c, "%s: expected a non-negative integer, got '%s'", key, quote(c, q, sizeof q));
    return DTX_OK;
}

/* "BASE64 RANK": decodes into tmp (room for c->n bytes). */
static dtx_status rank_line(cursor *c, uint8_t *tmp, size_t *nbytes, int64_t *rank) {
    char q[256];
    const char *sp = memchr(c->s, ' ', c->n);
    if (!sp) return bad(c, "expected 'BASE64 RANK', got '%s'", quote(c, q, sizeof q));
    size_t bl = (size_t)(sp - c->s);
    int64_t got = dtx_b64_decode(c->s, bl, tmp);
    if (got <= 0) return bad(c, "the token '%.*s' is not canonical base64", (int)(bl > 40 ? 40 : bl), c->s);
    if (parse_uint(sp + 1, c->n - bl - 1, rank))
        return bad(c, "expected a rank (a non-negative integer) after the token, got '%s'", quote(c, q, sizeof q));
    *nbytes = (size_t)got;
    return DTX_OK;
}

static dtx_status add_cl100k_specials(struct dtx_tokenizer *t) {
    static const struct { const char *name; int id; } sp[] = {
        {"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258}, {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260}, {"<|endofprompt|>", 100276},
    };
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) {
        dtx_status st = dtx_tok_add_special(t, sp[i].name, sp[i].id);
        if (st) return st;
    }
    return DTX_OK;
}

static dtx_status load_tiktoken(struct dtx_tokenizer *t, cursor *c, uint8_t *tmp) {
    t->source = DTX_TOKSRC_TIKTOKEN;
    dtx_status st;
    while (next_line(c)) {
        if (c->n == 0)
            return bad(c, c->had_nl ? "empty line in a tiktoken rank file" : "unexpected end of the rank file");
        size_t nb;
        int64_t rank;
        if ((st = rank_line(c, tmp, &nb, &rank))) return st;
        if ((st = dtx_tok_add(t, tmp, nb, rank))) return bad_lib(c, st);
    }
    if (t->n_ranks == 0) return dtx_fail(DTX_ERR_FORMAT, "%s: no ranks in the tiktoken rank file", c->path);
    if (t->n_ranks == CL100K_RANKS && t->vocab_size == CL100K_RANKS && (st = add_cl100k_specials(t))) return st;
    return DTX_OK;
}

static dtx_status load_ours(struct dtx_tokenizer *t, cursor *c, uint8_t *tmp) {
    char q[256];
    t->source = DTX_TOKSRC_DIFFTX;
    dtx_status st;
    if (!next_line(c)) return bad(c, "the file ends before the 'pattern' line");
    if (c->n < 8 || memcmp(c->s, "pattern ", 8) != 0) return bad(c, "expected 'pattern NAME', got '%s'", quote(c, q, sizeof q));
    if (c->n - 8 != strlen(DTX_SPLIT_CL100K) || memcmp(c->s + 8, DTX_SPLIT_CL100K, c->n - 8) != 0)
        return bad(c, "unknown pattern '%s' (this version knows only " DTX_SPLIT_CL100K ")", quote(c, q, sizeof q) + 8);
    int64_t vocab, n_ord, n_spec;
    if ((st = header_num(c, "vocab_size", &vocab))) return st;
    int64_t vocab_line = c->line;
    if ((st = header_num(c, "ordinary", &n_ord))) return st;
    if (n_ord < 256) return bad(c, "ordinary %lld: at least the 256 byte tokens are needed", (long long)n_ord);
    if (n_ord > vocab) return bad(c, "ordinary %lld is more than vocab_size %lld", (long long)n_ord, (long long)vocab);
    if ((st = header_num(c, "special", &n_spec))) return st;
    if (n_spec > DTX_TOK_MAX_SPECIAL) return bad(c, "special %lld: at most %d special tokens", (long long)n_spec, DTX_TOK_MAX_SPECIAL);
    for (int64_t i = 0; i < n_spec; i++) {
        if (!next_line(c)) return bad(c, "the file ends after %lld of %lld special tokens", (long long)i, (long long)n_spec);
        const char *sp = memchr(c->s, ' ', c->n);
        int64_t id;
        if (!sp || sp == c->s || parse_uint(sp + 1, c->n - (size_t)(sp - c->s) - 1, &id))
            return bad(c, "expected a special token 'NAME ID', got '%s'", quote(c, q, sizeof q));
        char name[DTX_TOK_SPECIAL_MAXLEN + 1];
        size_t nl = (size_t)(sp - c->s);
        if (nl > DTX_TOK_SPECIAL_MAXLEN) return bad(c, "special token name longer than %d bytes", DTX_TOK_SPECIAL_MAXLEN);
        memcpy(name, c->s, nl);
        name[nl] = '\0';
        if (memchr(name, '\0', nl)) return bad(c, "special token name holds a NUL byte");
        if ((st = dtx_tok_add_special(t, name, id))) return bad_lib(c, st);
    }
    int64_t prev = -1;
    for (int64_t i = 0; i < n_ord; i++) {
        if (!next_line(c)) return bad(c, "the file ends after %lld of %lld ordinary tokens", (long long)i, (long long)n_ord);
        size_t nb;
        int64_t rank;
        if ((st = rank_line(c, tmp, &nb, &rank))) return st;
        if (rank <= prev) return bad(c, "rank %lld after rank %lld: ranks must increase", (long long)rank, (long long)prev);
        prev = rank;
        if ((st = dtx_tok_add(t, tmp, nb, rank))) return bad_lib(c, st);
    }
    if (!c->had_nl) return bad(c, "no newline at the end of the line (truncated file?)");
    if (next_line(c)) return bad(c, "unexpected content after the %lld ordinary tokens: '%s'", (long long)n_ord, quote(c, q, sizeof q));
    if (t->vocab_size != vocab)
        return dtx_fail(DTX_ERR_FORMAT, "%s:%lld: vocab_size %lld, but the largest id is %lld", c->path,
                        (long long)vocab_line, (long long)vocab, (long long)t->vocab_size - 1);
    return DTX_OK;
}

/* Whether the current line reads as "BASE64 RANK" (without a message). */
static int first_is_rank_line(const cursor *c, uint8_t *tmp) {
    const char *sp = memchr(c->s, ' ', c->n);
    int64_t rank;
    return sp && dtx_b64_decode(c->s, (size_t)(sp - c->s), tmp) > 0 &&
           parse_uint(sp + 1, c->n - (size_t)(sp - c->s) - 1, &rank) == 0;
}

/* A tokenizer.json or tokenizer.model, already read. */
static dtx_status load_other(dtx_tokenizer **out, const char *path, const char *buf, size_t len, int json) {
    struct dtx_tokenizer *t = NULL;
    dtx_status st = dtx_tok_new(&t, 1024, len / 2);
    if (!st) st = json ? dtx_hf_tokenizer_parse(t, path, buf, len) : dtx_spm_parse(t, path, (const uint8_t *)buf, len);
    if (!st && (st = dtx_tok_finish(t)) == DTX_ERR_FORMAT) {
        char msg[384];
        snprintf(msg, sizeof msg, "%s", dtx_last_error());
        st = dtx_fail(st, "%s: %s", path, msg);
    }
    if (st) {
        dtx_tokenizer_free(t);
        return st;
    }
    *out = t;
    return DTX_OK;
}

dtx_status dtx_tokenizer_load(dtx_tokenizer **out, const char *path) {
    *out = NULL;
    char *buf = NULL;
    size_t len = 0;
    struct stat sb;
    char in_dir[4200];
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) { /* a Hugging Face folder */
        snprintf(in_dir, sizeof in_dir, "%s/tokenizer.json", path);
        if (stat(in_dir, &sb) != 0) snprintf(in_dir, sizeof in_dir, "%s/tokenizer.model", path);
        if (stat(in_dir, &sb) != 0)
            return dtx_fail(DTX_ERR_IO, "%s: a folder without tokenizer.json or tokenizer.model", path);
        path = in_dir;
    }
    dtx_status st = dtx_read_file(path, &buf, &len);
    if (st) return st;
    cursor c = {.path = path, .buf = buf, .len = len};
    if (len == 0) {
        free(buf);
        return dtx_fail(DTX_ERR_FORMAT, "%s: empty file (neither a difftx tokenizer nor a tiktoken rank file)", path);
    }
    size_t ws = 0;
    while (ws < len && (buf[ws] == ' ' || buf[ws] == '\t' || buf[ws] == '\n' || buf[ws] == '\r')) ws++;
    int json = ws < len && buf[ws] == '{';
    if (json || dtx_spm_sniff((const uint8_t *)buf, len)) {
        st = load_other(out, path, buf, len, json);
        free(buf);
        return st;
    }
    if (memchr(buf, '\r', len)) { /* report the first CR's line */
        const char *cr = memchr(buf, '\r', len);
        int64_t line = 1;
        for (const char *p = buf; p < cr; p++) line += *p == '\n';
        free(buf);
        return dtx_fail(DTX_ERR_FORMAT, "%s:%lld: carriage return: lines must end in a bare LF", path, (long long)line);
    }
    int64_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += buf[i] == '\n';
    struct dtx_tokenizer *t = NULL;
    uint8_t *tmp = malloc(len);
    st = tmp ? dtx_tok_new(&t, lines + 64, len) : dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", path);
    if (st == DTX_OK) {
        next_line(&c);
        size_t ml = strlen(MAGIC);
        if (c.n > ml && memcmp(c.s, MAGIC, ml) == 0 && c.s[ml] == ' ') {
            char q[256];
            if (c.n != ml + 2 || c.s[ml + 1] != '0' + VERSION)
                st = bad(&c, "unsupported version '%s' (this build reads " MAGIC " %d)", quote(&c, q, sizeof q) + ml + 1, VERSION);
            else
                st = load_ours(t, &c, tmp);
        } else if (first_is_rank_line(&c, tmp)) {
            c.pos = 0;
            c.line = 0;
            st = load_tiktoken(t, &c, tmp);
        } else {
            char q[256];
            st = bad(&c, "neither a difftx tokenizer ('" MAGIC " %d') nor a tiktoken rank file ('BASE64 RANK'): '%s'",
                     VERSION, quote(&c, q, sizeof q));
        }
    }
    if (st == DTX_OK && (st = dtx_tok_finish(t)) == DTX_ERR_FORMAT) {
        char msg[384];
        snprintf(msg, sizeof msg, "%s", dtx_last_error());
        st = dtx_fail(st, "%s: %s", path, msg);
    }
    free(tmp);
    free(buf);
    if (st) {
        dtx_tokenizer_free(t);
        return st;
    }
    *out = t;
    return DTX_OK;
}

/* ------------------------------------------------------------ writing */

static int write_body(FILE *f, const struct dtx_tokenizer *t) {
    fprintf(f, MAGIC " %d\npattern " DTX_SPLIT_CL100K "\nvocab_size %lld\nordinary %lld\nspecial %d\n", VERSION,
            (long long)t->vocab_size, (long long)t->n_ranks, t->n_special);
    for (int i = 0; i < t->n_special; i++) fprintf(f, "%s %ld\n", t->special[i].name, (long)t->special[i].id);
    size_t cap = 0;
    char *b64 = NULL;
    for (int64_t id = 0; id < t->vocab_size; id++) {
        if (t->kind[id] != 1) continue;
        size_t need = dtx_b64_len(t->len[id]);
        if (need > cap) {
            char *nb = realloc(b64, need);
            if (!nb) {
                free(b64);
                return ENOMEM;
            }
            b64 = nb;
            cap = need;
        }
        dtx_b64_encode(t->arena + t->off[id], t->len[id], b64);
        fwrite(b64, 1, need, f);
        fprintf(f, " %lld\n", (long long)id);
    }
    free(b64);
    return ferror(f) ? (errno ? errno : EIO) : 0;
}

dtx_status dtx_tokenizer_save(const dtx_tokenizer *t, const char *path) {
    if (t->source != DTX_TOKSRC_DIFFTX && t->source != DTX_TOKSRC_TIKTOKEN)
        return dtx_fail(DTX_ERR_ARG, "%s: a %s tokenizer cannot be saved in difftx's format (use its own file)", path,
                        dtx_tokenizer_source(t));
    dtx_atomic_file w;
    dtx_status st = dtx_atomic_open(&w, path);
    return st ? st : dtx_atomic_commit(&w, write_body(w.fp, t));
}
