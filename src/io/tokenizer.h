/* Internal parts of the byte-level BPE tokenizer (docs/tokenizer.md), shared
 * by src/io/tokenizer*.c; its growable id list (dtx_idbuf) is the one every
 * other part of difftx appends token ids to. Not part of the public API.
 *
 *   tokenizer.c        the object, the byte-string -> rank table, encode
 *                      (tiktoken's byte-pair merge, added tokens) and decode
 *   tokenizer_split.c  pre-tokenisation with a split pattern (PCRE2)
 *   tokenizer_file.c   our file format, tiktoken rank files, base64; tells
 *                      the four kinds of file apart
 *   tokenizer_hf.c     Hugging Face tokenizer.json (byte-level BPE, merges)
 *   tokenizer_spm.c    SentencePiece tokenizer.model (BPE, byte fallback)
 *   tokenizer_train.c  BPE training
 */
#ifndef DTX_IO_TOKENIZER_H
#define DTX_IO_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

/* ------------------------------------------------------------ pre-tokenisation */

/* A compiled split pattern. Matching is thread-safe: every call makes its
 * own match data. */
typedef struct dtx_split dtx_split;

/* The name stored in tokenizer files for the pattern our format uses. */
#define DTX_SPLIT_CL100K "cl100k_base"
/* The patterns as their authors wrote them (Rust regex / Oniguruma syntax;
 * dtx_split_compile reads them as those engines do). */
extern const char DTX_PATTERN_CL100K[]; /* tiktoken cl100k_base, Llama 3 */
extern const char DTX_PATTERN_GPT2[];   /* GPT-2, HF ByteLevel use_regex */

/* The cl100k_base pattern. */
dtx_status dtx_split_new(dtx_split **out);
/* Any pattern of the regex dialect Hugging Face and tiktoken use: \s and \S
 * mean Unicode White_Space (as in Rust's regex and Oniguruma, unlike
 * PCRE2's), the rest is PCRE2's, with UTF and Unicode properties. A pattern
 * PCRE2 cannot compile, or a \S inside a class, is DTX_ERR_FORMAT naming
 * the offset. */
dtx_status dtx_split_compile(dtx_split **out, const char *pattern, size_t len);
/* Tests: non-zero makes dtx_split_new skip the JIT (the interpreter gives
 * the same pieces). */
extern int dtx_split_no_jit;
void dtx_split_free(dtx_split *s);

/* Called for each piece in order; a non-zero return stops the walk and
 * becomes dtx_split_run's return value. */
typedef int (*dtx_piece_fn)(const uint8_t *piece, size_t len, void *ctx);

/* Cuts text[0, len) into pieces that cover it exactly, in order, none empty:
 * the pattern's matches (leftmost-first, as tiktoken's regex), and between
 * them any bytes the pattern cannot match (bytes of invalid UTF-8), each
 * maximal such run one piece. Returns 0, fn's non-zero value, or -1 after
 * dtx_fail (a PCRE2 error). */
int dtx_split_run(const dtx_split *s, const uint8_t *text, size_t len, dtx_piece_fn fn, void *ctx);

/* ------------------------------------------------------------ byte-string table */

/* Open addressing, linear probing: byte strings (kept in the owner's arena)
 * -> int32 value. Keys are referenced by (offset, length) into the arena. */
typedef struct {
    uint64_t head;  /* the key's first 8 bytes, zero-padded: most keys compare here */
    uint32_t hash;  /* 0: empty slot */
    int32_t value;
    uint32_t len;
    uint32_t off;   /* arenas stay below 4 GiB */
} dtx_bmap_slot;

typedef struct {
    dtx_bmap_slot *slots;
    size_t cap;   /* power of two */
    size_t count;
} dtx_bmap;

uint32_t dtx_bytes_hash(const uint8_t *p, size_t n);
/* cap_hint: the number of keys expected. 0 or -1 (dtx_fail) on failure. */
int dtx_bmap_init(dtx_bmap *m, size_t cap_hint);
void dtx_bmap_free(dtx_bmap *m);
/* The value of key p[0, n), or -1. */
int32_t dtx_bmap_get(const dtx_bmap *m, const uint8_t *arena, const uint8_t *p, size_t n);
/* Inserts key (arena + off, n) -> value; grows as needed. Returns the value
 * already there (the key is then not inserted) or -1 when new; -2 on out of
 * memory (dtx_fail). */
int32_t dtx_bmap_put(dtx_bmap *m, const uint8_t *arena, uint32_t off, size_t n, int32_t value);

/* ------------------------------------------------------------ the tokenizer */

/* Our file format's limits on special tokens (a tokenizer.json's added
 * tokens have none beyond the file's). */
#define DTX_TOK_MAX_SPECIAL 64
#define DTX_TOK_SPECIAL_MAXLEN 64

typedef enum {
    DTX_TOKSRC_DIFFTX = 0,   /* trained here, or our file format        */
    DTX_TOKSRC_TIKTOKEN = 1, /* a tiktoken rank file                    */
    DTX_TOKSRC_HF = 2,       /* a Hugging Face tokenizer.json           */
    DTX_TOKSRC_SPM = 3,      /* a SentencePiece tokenizer.model         */
} dtx_tok_source;

/* A token matched as a whole in text before any other splitting: a special
 * token (matched only in DTX_ENCODE_SPECIAL mode), or a Hugging Face added
 * token that is not special (matched in both modes). */
typedef struct {
    char *name;         /* its text, NUL-terminated (malloc'd)              */
    size_t len;
    int32_t id;
    uint8_t special;
    uint8_t normalized; /* HF: matched in the second pass (see tokenizer.c) */
} dtx_special;

struct dtx_hfbpe; /* tokenizer_hf.c  */
struct dtx_spm;   /* tokenizer_spm.c */

struct dtx_tokenizer {
    dtx_tok_source source;
    int64_t vocab_size;   /* largest id + 1                                  */
    int64_t n_ranks;      /* ordinary (byte-string) tokens                  */
    int64_t vocab_cap;    /* room in off/len/kind                            */
    /* Per id in [0, vocab_size): the token's bytes, arena + off[id], len[id];
     * kind[id] 0: no token (a hole), 1: ordinary, 2: special. */
    uint32_t *off;
    uint32_t *len;
    uint8_t *kind;
    uint8_t *arena;
    size_t arena_len, arena_cap;
    dtx_bmap map;         /* ordinary token bytes -> id (= rank)             */
    int32_t byte_id[256]; /* the token of each single byte (all present)     */
    int n_special, cap_special;
    dtx_special *special; /* in the order added                               */
    int32_t bos, eos;     /* -1: none (dtx_tokenizer_bos/eos)                  */
    dtx_split *split;     /* our format and tiktoken: cl100k_base              */
    struct dtx_hfbpe *hf; /* DTX_TOKSRC_HF                                     */
    struct dtx_spm *spm;  /* DTX_TOKSRC_SPM                                    */
};

/* An empty tokenizer able to hold ids below vocab_cap and arena_hint bytes
 * (both grow). */
dtx_status dtx_tok_new(struct dtx_tokenizer **out, int64_t vocab_cap, size_t arena_hint);
/* Adds an ordinary token: its bytes are copied into the arena. Fails with
 * DTX_ERR_FORMAT ("duplicate ...") when the bytes or the id are taken. */
dtx_status dtx_tok_add(struct dtx_tokenizer *t, const uint8_t *bytes, size_t n, int64_t id);
/* Adds a special token (printable ASCII, no spaces, 1..64 bytes). */
dtx_status dtx_tok_add_special(struct dtx_tokenizer *t, const char *name, int64_t id);
/* Sets id's bytes (copied) and kind (1 ordinary, 2 special) without the
 * byte-string table: tokens that other tokens may share bytes with
 * (SentencePiece's "\xe2\x96\x81" and <0x20>). replace: an id already set
 * takes the new bytes (a tokenizer.json's added token over its vocab entry);
 * otherwise a taken id is DTX_ERR_FORMAT. */
dtx_status dtx_tok_set(struct dtx_tokenizer *t, int64_t id, const uint8_t *bytes, size_t n, int kind, int replace);
/* Adds a token matched as a whole in text (any bytes but NUL, at least 1);
 * the id must be set already (dtx_tok_set). */
dtx_status dtx_tok_add_matched(struct dtx_tokenizer *t, const uint8_t *bytes, size_t n, int64_t id, int special,
                               int normalized);
/* Checks the finished vocabulary (every single byte present, ...), compiles
 * the split pattern. */
dtx_status dtx_tok_finish(struct dtx_tokenizer *t);

/* Appends the BPE encoding of one piece (tiktoken's byte-pair merge: the
 * whole piece if it is a token, else repeatedly merge the adjacent pair
 * whose concatenation has the lowest rank, leftmost first). */
typedef struct {
    int32_t *ids;
    int64_t n, cap;
    /* scratch for the merge */
    void *scratch;
    size_t scratch_cap;
} dtx_idbuf;

dtx_status dtx_tok_encode_piece(const struct dtx_tokenizer *t, const uint8_t *p, size_t n, dtx_idbuf *out);
void dtx_idbuf_free(dtx_idbuf *b);
/* Appends ids [n] (growing the buffer); DTX_ERR_NOMEM when it cannot. */
dtx_status dtx_idbuf_append(dtx_idbuf *b, const int32_t *ids, int64_t n);
/* Room for extra more ids. */
dtx_status dtx_idbuf_reserve(dtx_idbuf *b, int64_t extra);
/* The buffer's scratch space, at least bytes long (NULL after dtx_fail). */
void *dtx_idbuf_scratch(dtx_idbuf *b, size_t bytes);

/* ------------------------------------------------------------ other kinds of file */

/* A Hugging Face tokenizer.json, already read (buf[len]); and the encoding
 * of text between added tokens. */
dtx_status dtx_hf_tokenizer_parse(struct dtx_tokenizer *t, const char *path, const char *buf, size_t len);
dtx_status dtx_hf_encode_text(const struct dtx_tokenizer *t, const uint8_t *p, size_t n, dtx_idbuf *out);
void dtx_hfbpe_free(struct dtx_hfbpe *h);
/* For difftx tokenizer info: the pre-tokenizer ("Split + ByteLevel") and
 * the number of merges. */
const char *dtx_hf_describe_pattern(const struct dtx_tokenizer *t);
int64_t dtx_hf_num_merges(const struct dtx_tokenizer *t);
/* A SentencePiece model (a ModelProto); the same. */
dtx_status dtx_spm_parse(struct dtx_tokenizer *t, const char *path, const uint8_t *buf, size_t len);
dtx_status dtx_spm_encode_text(const struct dtx_tokenizer *t, const uint8_t *p, size_t n, dtx_idbuf *out);
void dtx_spm_free(struct dtx_spm *s);
/* Whether buf reads as a ModelProto (its first field a SentencePiece). */
int dtx_spm_sniff(const uint8_t *buf, size_t len);
/* Tests: 0 picks the merge by piece length, 1 forces tiktoken's quadratic
 * loop, 2 the heap (both give the same ids). */
extern int dtx_tok_merge_method;

/* ------------------------------------------------------------ UTF-8 */

/* The length (1 to 4) of the well-formed UTF-8 character at s[0, n), its
 * code point in *cp; 0 when it is not one (overlong, a surrogate, past
 * U+10FFFF, cut short): the rule both tokenizer.json's byte-level names and
 * SentencePiece's normalizer read text by. */
size_t dtx_utf8_char(const uint8_t *s, size_t n, uint32_t *cp);

/* ------------------------------------------------------------ the merge queue */

/* A binary heap of TYPE, the entry less(a, b) says first on top: the queue
 * of pairs every BPE encoder here merges from (tiktoken's long pieces,
 * tokenizer.json's words, SentencePiece's agenda). Defines
 * NAME_push(h, &n, e) and e = NAME_pop(h, &n) (n > 0). */
#define DTX_DEFINE_HEAP(NAME, TYPE, LESS)                                                                        \
    static inline void NAME##_push(TYPE *h, size_t *n, TYPE e) {                                                 \
        size_t i = (*n)++;                                                                                      \
        while (i > 0) {                                                                                         \
            size_t up = (i - 1) / 2;                                                                            \
            if (!LESS(&e, &h[up])) break;                                                                       \
            h[i] = h[up];                                                                                       \
            i = up;                                                                                             \
        }                                                                                                       \
        h[i] = e;                                                                                               \
    }                                                                                                           \
    static inline TYPE NAME##_pop(TYPE *h, size_t *n) {                                                         \
        TYPE top = h[0], last = h[--(*n)];                                                                      \
        size_t i = 0;                                                                                           \
        for (;;) {                                                                                              \
            size_t c = 2 * i + 1;                                                                               \
            if (c >= *n) break;                                                                                 \
            if (c + 1 < *n && LESS(&h[c + 1], &h[c])) c++;                                                      \
            if (!LESS(&h[c], &last)) break;                                                                     \
            h[i] = h[c];                                                                                        \
            i = c;                                                                                              \
        }                                                                                                       \
        h[i] = last;                                                                                            \
        return top;                                                                                             \
    }

/* ------------------------------------------------------------ base64 */

/* Standard alphabet with '=' padding. Encoded length of n bytes. */
size_t dtx_b64_len(size_t n);
/* Writes dtx_b64_len(n) characters (no terminator). */
void dtx_b64_encode(const uint8_t *in, size_t n, char *out);
/* Decodes s[0, n) strictly (length a multiple of 4, canonical padding);
 * returns the number of bytes written to out (room for n/4*3 bytes), or -1. */
int64_t dtx_b64_decode(const char *s, size_t n, uint8_t *out);

#endif
