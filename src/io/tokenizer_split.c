/* Pre-tokenisation: split patterns, through PCRE2.
 *
 * tiktoken (npm tiktoken 1.0.22, encoders/cl100k_base.json) splits with
 * DTX_PATTERN_CL100K below, run by Rust's fancy-regex; Hugging Face's
 * tokenizers runs a tokenizer.json's Split patterns and ByteLevel's GPT-2
 * pattern with Oniguruma. In both, \s is the Unicode White_Space property:
 * [\t\n\x0b\x0c\r\x{85}] and the Z categories. PCRE2's \s in UCP mode is
 * \h and \v, which also hold U+180E (MONGOLIAN VOWEL SEPARATOR, format
 * character Cf since Unicode 6.3). So dtx_split_compile spells every \s out
 * as that class, and \S as its complement. The rest (leftmost-first alternation,
 * greedy backtracking, (?i) with Unicode simple case folding, \p{L}, \p{N})
 * means the same in both engines, up to the Unicode version of their tables
 * (PCRE2 10.42: Unicode 14; code points assigned since then may split
 * differently).
 *
 * Invalid UTF-8: PCRE2_MATCH_INVALID_UTF makes invalid sequences match
 * nothing, so matches never contain them; every maximal run of bytes between
 * two matches (or before the first, or after the last) becomes a piece of its
 * own. Valid UTF-8 is always matched (the alternatives cover letters,
 * numbers, whitespace and everything else), so on valid text the pieces are
 * exactly tiktoken's. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer.h"

#define WS "\\t\\n\\x0b\\x0c\\r\\x{85}\\p{Z}" /* White_Space, inside a class */

const char DTX_PATTERN_CL100K[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char DTX_PATTERN_GPT2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct dtx_split {
    pcre2_code *code;
    int jit;
};

int dtx_split_no_jit = 0;

/* The pattern with \s and \S spelled out (see the top); NULL after
 * dtx_fail. */
static char *spell_out_whitespace(const char *p, size_t n) {
    static const char ws[] = WS;
    size_t wl = sizeof ws - 1, cap = n + 1, o = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '\\') cap += wl + 4, i++;
    char *out = malloc(cap);
    if (!out) {
        dtx_fail(DTX_ERR_NOMEM, "out of memory for a split pattern");
        return NULL;
    }
    int in_class = 0;
    size_t class_start = 0; /* where the class's first member is */
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n && (p[i + 1] == 's' || p[i + 1] == 'S')) {
            int neg = p[i + 1] == 'S';
            if (in_class && neg) {
                free(out);
                dtx_fail(DTX_ERR_FORMAT, "split pattern offset %zu: \\S inside a class [...] is not supported", i);
                return NULL;
            }
            if (!in_class) out[o++] = '[';
            if (neg) out[o++] = '^';
            memcpy(out + o, ws, wl);
            o += wl;
            if (!in_class) out[o++] = ']';
            i++;
            continue;
        }
        if (c == '\\' && i + 1 < n) { /* any other escape, as it is */
            out[o++] = c;
            out[o++] = p[++i];
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            out[o++] = c;
            if (i + 1 < n && p[i + 1] == '^') out[o++] = p[++i];
            class_start = i + 1;
            continue;
        }
        if (in_class && c == ']' && i != class_start) in_class = 0;
        out[o++] = c;
    }
    out[o] = '\0';
    return out;
}

dtx_status dtx_split_new(dtx_split **out) { return dtx_split_compile(out, DTX_PATTERN_CL100K, strlen(DTX_PATTERN_CL100K)); }

dtx_status dtx_split_compile(dtx_split **out, const char *pattern, size_t len) {
    *out = NULL;
    char *pcre = spell_out_whitespace(pattern, len);
    if (!pcre) return dtx_last_status();
    dtx_split *s = calloc(1, sizeof *s);
    if (!s) {
        free(pcre);
        return dtx_fail(DTX_ERR_NOMEM, "out of memory for the split pattern");
    }
    int err;
    PCRE2_SIZE erroff;
    s->code = pcre2_compile((PCRE2_SPTR)pcre, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                            &err, &erroff, NULL);
    free(pcre);
    if (!s->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        free(s);
        return dtx_fail(DTX_ERR_FORMAT, "the split pattern '%s' does not compile (PCRE2: %s)",
                        dtx_show_n(pattern, len).s, (const char *)msg);
    }
    /* Without the JIT (not built for this CPU) the interpreter gives the
     * same pieces, only slower. */
    s->jit = !dtx_split_no_jit && pcre2_jit_compile(s->code, PCRE2_JIT_COMPLETE) == 0;
    *out = s;
    return DTX_OK;
}

void dtx_split_free(dtx_split *s) {
    if (!s) return;
    pcre2_code_free(s->code);
    free(s);
}

typedef struct {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *stack;
} matcher;

static void matcher_free(matcher *m) {
    pcre2_match_data_free(m->md);
    pcre2_match_context_free(m->mctx);
    pcre2_jit_stack_free(m->stack);
}

/* One match from pos. On PCRE2_ERROR_JIT_STACKLIMIT (deep backtracking on a
 * very long piece) retries with a bigger JIT stack; on the interpreter's
 * limits, raises them. */
static int match_at(const dtx_split *s, matcher *m, const uint8_t *text, size_t len, size_t pos) {
    for (int attempt = 0;; attempt++) {
        int rc = s->jit ? pcre2_jit_match(s->code, text, len, pos, 0, m->md, m->mctx)
                        : pcre2_match(s->code, text, len, pos, 0, m->md, m->mctx);
        if (rc != PCRE2_ERROR_JIT_STACKLIMIT && rc != PCRE2_ERROR_MATCHLIMIT && rc != PCRE2_ERROR_HEAPLIMIT &&
            rc != PCRE2_ERROR_DEPTHLIMIT)
            return rc;
        if (attempt == 3) return rc;
        if (!m->mctx && !(m->mctx = pcre2_match_context_create(NULL))) return PCRE2_ERROR_NOMEMORY;
        if (s->jit) {
            size_t max = (size_t)(1u << 20) << (3 * attempt); /* 1, 8, 64 MiB */
            pcre2_jit_stack_free(m->stack);
            m->stack = pcre2_jit_stack_create(32 * 1024, max, NULL);
            if (!m->stack) return PCRE2_ERROR_NOMEMORY;
            pcre2_jit_stack_assign(m->mctx, NULL, m->stack);
        } else {
            pcre2_set_match_limit(m->mctx, UINT32_MAX);
            pcre2_set_depth_limit(m->mctx, UINT32_MAX);
            pcre2_set_heap_limit(m->mctx, UINT32_MAX);
        }
    }
}

int dtx_split_run(const dtx_split *s, const uint8_t *text, size_t len, dtx_piece_fn fn, void *ctx) {
    if (len == 0) return 0;
    matcher m = {0};
    m.md = pcre2_match_data_create_from_pattern(s->code, NULL);
    if (!m.md) {
        dtx_fail(DTX_ERR_NOMEM, "out of memory for PCRE2 match data");
        return -1;
    }
    size_t pos = 0;
    int ret = 0;
    while (pos < len) {
        int rc = match_at(s, &m, text, len, pos);
        size_t ms = len, me = len;
        if (rc >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m.md);
            ms = ov[0];
            me = ov[1];
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            dtx_fail(DTX_ERR_ARG, "pre-tokenising at byte %zu: PCRE2: %s", pos, (const char *)msg);
            ret = -1;
            break;
        }
        if (ms > pos && (ret = fn(text + pos, ms - pos, ctx))) break; /* bytes the pattern cannot match */
        if (me == ms) {
            /* The pattern has no empty match; should one appear, move on by
             * a byte so the walk always ends and the pieces still cover the text. */
            if (ms < len && (ret = fn(text + ms, 1, ctx))) break;
            pos = ms + 1;
            continue;
        }
        if ((ret = fn(text + ms, me - ms, ctx))) break;
        pos = me;
    }
    matcher_free(&m);
    return ret;
}
