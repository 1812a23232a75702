/* Safetensors reader and writer. The reader trusts nothing in the file: the
 * whole file is mapped read-only, every length, offset, shape and dtype is
 * checked against the file size before a tensor pointer is handed out, and
 * every failure leaves one line naming the file and the tensor or key.
 * Multi-byte values are assembled from bytes (le16/le32/le64), so neither
 * host byte order nor alignment matters; on x86-64 the compiler turns these
 * into plain unaligned loads. */
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The reference implementation refuses headers over 100 MB as well: a
 * header that large is an attack or a mistake, and cJSON would need many
 * times that in memory. */
#define MAX_HEADER ((uint64_t)100 << 20)
/* cJSON hands numbers over as doubles. Below 2^53 every integer is a double
 * and a correctly rounded integer literal lands on itself; above it "2^53+1"
 * would silently read as 2^53. No real file needs larger values. */
#define MAX_JSON_INT (((int64_t)1 << 53) - 1)

static const char *const dtype_names[] = {"F32", "BF16", "F16", "I8", "U8"};
static const size_t dtype_sizes[] = {4, 2, 2, 1, 1};
#define N_DTYPES 5

/* ------------------------------------------------------ scalar conversions */


static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (unsigned)p[1] << 8); }
static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

float dtx_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return dtx_bits_f32(sign | 0x7f800000u | man << 13); /* inf, NaN (payload kept) */
    if (exp != 0) return dtx_bits_f32(sign | (exp + 112u) << 23 | man << 13); /* rebias 15 -> 127 */
    float v = (float)man * 0x1p-24f; /* zero or subnormal: man * 2^-24, exact in float */
    return sign ? -v : v;
}

void dtx_st_to_real(const dtx_st_tensor *t, real *dst) { dtx_st_rows_to_real(t, 0, t->ndim ? t->shape[0] : 1, dst); }

void dtx_st_rows_to_real(const dtx_st_tensor *t, int64_t first, int64_t count, real *dst) {
    static const size_t width[] = {[DTX_ST_F32] = 4, [DTX_ST_BF16] = 2, [DTX_ST_F16] = 2, [DTX_ST_I8] = 1, [DTX_ST_U8] = 1};
    size_t row = t->ndim > 1 && t->shape[0] > 0 ? (size_t)(t->numel / t->shape[0]) : 1;
    const uint8_t *p = t->data + (size_t)first * row * width[t->dtype];
    size_t n = (size_t)count * row;
    switch (t->dtype) {
    case DTX_ST_F32:
        /* byte loads: a foreign writer may leave F32 data unaligned */
        for (size_t i = 0; i < n; i++) dst[i] = (real)dtx_bits_f32(le32(p + 4 * i));
        break;
    case DTX_ST_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = (real)dtx_bf16_to_f32(le16(p + 2 * i));
        break;
    case DTX_ST_F16:
        for (size_t i = 0; i < n; i++) dst[i] = (real)dtx_f16_to_f32(le16(p + 2 * i));
        break;
    case DTX_ST_I8:
        for (size_t i = 0; i < n; i++) dst[i] = (real)(int8_t)p[i];
        break;
    case DTX_ST_U8:
        for (size_t i = 0; i < n; i++) dst[i] = (real)p[i];
        break;
    }
}

/* ---------------------------------------------------------------- helpers */


/* "[2, 3]" for messages. */
static dtx_shown show_shape(const int64_t *shape, int ndim) {
    dtx_shown o;
    size_t k = 0;
    o.s[k++] = '[';
    int i = 0;
    for (; i < ndim && k < sizeof o.s - 32; i++)
        k += (size_t)snprintf(o.s + k, sizeof o.s - k, "%s%" PRId64, i ? ", " : "", shape[i]);
    snprintf(o.s + k, sizeof o.s - k, "%s]", i < ndim ? ", ..." : "");
    return o;
}

static char *copy_str(const char *s) {
    size_t n = strlen(s);
    char *c = dtx_alloc(n + 1, 1);
    if (c) memcpy(c, s, n + 1);
    return c;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name that occurs twice in names[0..n), or NULL. */
static const char *find_duplicate(const char *const *names, size_t n, dtx_status *st) {
    *st = DTX_OK;
    if (n < 2) return NULL;
    const char **sorted = dtx_alloc(n, sizeof *sorted);
    if (!sorted) { *st = DTX_ERR_NOMEM; return NULL; }
    memcpy(sorted, names, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_str_ptr);
    const char *dup = NULL;
    for (size_t i = 1; i < n && !dup; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) dup = sorted[i];
    free(sorted);
    return dup;
}

/* ------------------------------------------------------------------ reader */

static dtx_status map_file(dtx_st_file *f, const char *path) {
    dtx_mapped m;
    dtx_status st = dtx_map_file(path, "cannot open", &m);
    if (st != DTX_OK) return st;
    /* also refuses an empty file, which has no mapping */
    if (m.size < 8) {
        size_t size = m.size;
        dtx_unmap_file(&m);
        return dtx_fail(DTX_ERR_FORMAT, "%s: truncated: %zu bytes, shorter than the 8-byte header length", path,
                        size);
    }
    f->file = m;
    return DTX_OK;
}

/* Whether the 8 bytes that should hold the header length are text: a
 * text file given where a model belongs (a tokenizer, a token list, a
 * shell script) reads as an absurd length, which would say nothing. */
static int starts_with_text(const uint8_t *m) {
    for (int i = 0; i < 8; i++)
        if (!((m[i] >= 0x20 && m[i] < 0x7f) || m[i] == '\n' || m[i] == '\r' || m[i] == '\t')) return 0;
    return 1;
}

/* Copies the header out (cJSON wants a NUL-terminated string) and parses
 * it. On success *text holds the copy, which the caller frees. */
static dtx_status parse_header(const dtx_st_file *f, const char *path, char **text, size_t *len,
                               cJSON **root) {
    const uint8_t *m = f->file.data;
    uint64_t n = le64(m);
    if (n > f->file.size - 8 && starts_with_text(m))
        return dtx_fail(DTX_ERR_FORMAT, "%s: not a safetensors file: it starts with text (\"%s\"), not an 8-byte "
                        "header length", path, dtx_show_n((const char *)m, 8).s);
    if (n > f->file.size - 8)
        return dtx_fail(DTX_ERR_FORMAT, "%s: header length %" PRIu64 " past the end of the file (%zu bytes)",
                        path, n, f->file.size);
    if (n > MAX_HEADER)
        return dtx_fail(DTX_ERR_FORMAT, "%s: header length %" PRIu64 " is absurdly large (limit 100 MiB)",
                        path, n);
    char *t = dtx_alloc((size_t)n + 1, 1);
    if (!t) return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory for a %" PRIu64 "-byte header", path, n);
    memcpy(t, m + 8, (size_t)n);
    t[n] = '\0';
    /* a NUL would end the text early for cJSON and hide what follows */
    const char *nul = memchr(t, '\0', (size_t)n);
    if (nul) {
        size_t at = (size_t)(nul - t);
        free(t);
        return dtx_fail(DTX_ERR_FORMAT, "%s: bad JSON header: NUL byte at header byte %zu", path, at);
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(t, &end, 1);
    if (!j) {
        size_t at = (end && end >= t && end <= t + n) ? (size_t)(end - t) : 0;
        free(t);
        return dtx_fail(DTX_ERR_FORMAT, "%s: bad JSON header: syntax error near header byte %zu of %" PRIu64,
                        path, at, n);
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        free(t);
        return dtx_fail(DTX_ERR_FORMAT, "%s: bad JSON header: not a JSON object", path);
    }
    *text = t;
    *len = (size_t)n;
    *root = j;
    return DTX_OK;
}

static dtx_status parse_meta(dtx_st_file *f, const char *path, const cJSON *meta) {
    if (!cJSON_IsObject(meta)) return dtx_fail(DTX_ERR_FORMAT, "%s: __metadata__ is not a JSON object", path);
    int n = cJSON_GetArraySize(meta);
    f->meta_keys = dtx_calloc((size_t)n, sizeof(char *));
    f->meta_values = dtx_calloc((size_t)n, sizeof(char *));
    if (!f->meta_keys || !f->meta_values) return DTX_ERR_NOMEM;
    f->n_meta = n;
    int i = 0;
    for (const cJSON *c = meta->child; c && i < n; c = c->next, i++) {
        if (!cJSON_IsString(c) || !c->valuestring)
            return dtx_fail(DTX_ERR_FORMAT, "%s: __metadata__ key '%s': value is not a string", path,
                            dtx_show(c->string).s);
        f->meta_keys[i] = copy_str(c->string);
        f->meta_values[i] = copy_str(c->valuestring);
        if (!f->meta_keys[i] || !f->meta_values[i]) return DTX_ERR_NOMEM;
    }
    dtx_status st;
    const char *dup = find_duplicate((const char *const *)f->meta_keys, (size_t)n, &st);
    if (st != DTX_OK) return st;
    if (dup) return dtx_fail(DTX_ERR_FORMAT, "%s: __metadata__ key '%s' appears twice", path, dtx_show(dup).s);
    return DTX_OK;
}

/* One entry of "shape" or "data_offsets": an exact integer in
 * [0, MAX_JSON_INT]. */
static dtx_status json_int(const char *path, const char *who, const char *field, int idx, const cJSON *j,
                           int64_t *out) {
    if (!cJSON_IsNumber(j))
        return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': %s[%d] is not a number", path, who, field, idx);
    double v = j->valuedouble;
    if (!isfinite(v) || v != floor(v))
        return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': %s[%d] = %.17g is not an integer", path, who, field,
                        idx, v);
    if (v < 0)
        return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': %s[%d] = %.17g is negative", path, who, field, idx, v);
    if (v > (double)MAX_JSON_INT)
        return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': %s[%d] = %.17g is too large (limit 2^53 - 1)", path,
                        who, field, idx, v);
    *out = (int64_t)v;
    return DTX_OK;
}

static dtx_status parse_dtype(const char *path, const char *who, const cJSON *j, dtx_st_dtype *out) {
    if (!cJSON_IsString(j) || !j->valuestring)
        return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': \"dtype\" is not a string", path, who);
    for (int d = 0; d < N_DTYPES; d++)
        if (strcmp(j->valuestring, dtype_names[d]) == 0) { *out = (dtx_st_dtype)d; return DTX_OK; }
    return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s' (supported: F32, BF16, F16, I8, U8)", path, who,
                    dtx_show(j->valuestring).s);
}

static dtx_status parse_shape(const char *path, const char *who, const cJSON *j, dtx_st_tensor *t) {
    if (!cJSON_IsArray(j)) return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': \"shape\" is not an array", path, who);
    int nd = 0;
    for (const cJSON *c = j->child; c; c = c->next, nd++) {
        if (nd == DTX_ST_MAX_DIMS)
            return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': \"shape\" has more than %d dims", path, who,
                            DTX_ST_MAX_DIMS);
        dtx_status st = json_int(path, who, "shape", nd, c, &t->shape[nd]);
        if (st != DTX_OK) return st;
    }
    t->ndim = nd;
    /* a zero dim makes the product 0 whatever the others are */
    int64_t numel = 1;
    for (int i = 0; i < nd; i++)
        if (t->shape[i] == 0) numel = 0;
    for (int i = 0; i < nd && numel; i++) {
        if (numel > INT64_MAX / t->shape[i])
            return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': element count of shape %s overflows", path, who,
                            show_shape(t->shape, nd).s);
        numel *= t->shape[i];
    }
    if (numel > INT64_MAX / (int64_t)dtype_sizes[t->dtype] || (uint64_t)numel > SIZE_MAX / 8)
        return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': byte size of shape %s overflows", path, who,
                        show_shape(t->shape, nd).s);
    t->numel = numel;
    t->nbytes = (size_t)numel * dtype_sizes[t->dtype];
    return DTX_OK;
}

static dtx_status parse_offsets(const char *path, const char *who, const cJSON *j, int64_t off[2]) {
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 2)
        return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': \"data_offsets\" is not an array of 2 integers", path,
                        who);
    dtx_status st = json_int(path, who, "data_offsets", 0, j->child, &off[0]);
    if (st == DTX_OK) st = json_int(path, who, "data_offsets", 1, j->child->next, &off[1]);
    return st;
}

/* Finds the three fields of an entry, refusing unknown and repeated keys
 * (cJSON keeps both copies of a repeated key; which one counts would be a
 * guess). */
static dtx_status entry_fields(const char *path, const char *who, const cJSON *e, const cJSON *fld[3]) {
    static const char *const keys[3] = {"dtype", "shape", "data_offsets"};
    if (!cJSON_IsObject(e)) return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", path, who);
    fld[0] = fld[1] = fld[2] = NULL;
    for (const cJSON *c = e->child; c; c = c->next) {
        int k = 0;
        while (k < 3 && strcmp(c->string, keys[k]) != 0) k++;
        if (k == 3)
            return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': unexpected key '%s'", path, who, dtx_show(c->string).s);
        if (fld[k]) return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': key \"%s\" appears twice", path, who, keys[k]);
        fld[k] = c;
    }
    for (int k = 0; k < 3; k++)
        if (!fld[k]) return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': missing \"%s\"", path, who, keys[k]);
    return DTX_OK;
}

/* Checks one entry against the data section (data_size bytes); leaves the
 * offsets in off for the layout check. */
static dtx_status parse_entry(const char *path, const cJSON *e, size_t data_size, dtx_st_tensor *t,
                              int64_t off[2]) {
    t->name = copy_str(e->string);
    if (!t->name) return DTX_ERR_NOMEM;
    dtx_shown who_buf = dtx_show(e->string);
    const char *who = who_buf.s;
    const cJSON *fld[3];
    dtx_status st = entry_fields(path, who, e, fld);
    if (st == DTX_OK) st = parse_dtype(path, who, fld[0], &t->dtype);
    if (st == DTX_OK) st = parse_shape(path, who, fld[1], t);
    if (st == DTX_OK) st = parse_offsets(path, who, fld[2], off);
    if (st != DTX_OK) return st;
    if (off[0] > off[1])
        return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64 "] have begin > end",
                        path, who, off[0], off[1]);
    if ((uint64_t)off[1] > data_size)
        return dtx_fail(DTX_ERR_FORMAT,
                        "%s: tensor '%s': data offsets out of range: [%" PRId64 ", %" PRId64 "] ends past "
                        "the %zu-byte data section",
                        path, who, off[0], off[1], data_size);
    if ((uint64_t)(off[1] - off[0]) != t->nbytes)
        return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': shape %s needs %zu bytes but data_offsets give %" PRId64,
                        path, who, show_shape(t->shape, t->ndim).s, t->nbytes, off[1] - off[0]);
    return DTX_OK;
}

typedef struct { int64_t begin, end; int idx; } span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->idx - y->idx;
}

/* The official format wants the data section tiled exactly: tensors sorted
 * by offset must follow each other with no overlap, no hole and nothing
 * left over at the end. */
static dtx_status check_layout(const dtx_st_file *f, const char *path, const int64_t (*off)[2], size_t data_size) {
    size_t n = (size_t)f->n_tensors;
    span *s = dtx_alloc(n, sizeof *s);
    if (!s) return DTX_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) s[i] = (span){off[i][0], off[i][1], (int)i};
    qsort(s, n, sizeof *s, cmp_span);
    dtx_status st = DTX_OK;
    int64_t pos = 0;
    for (size_t i = 0; i < n && st == DTX_OK; i++) {
        const char *name = f->tensors[s[i].idx].name;
        if (s[i].begin < pos)
            st = dtx_fail(DTX_ERR_FORMAT,
                          "%s: tensors '%s' and '%s' overlap (data_offsets [%" PRId64 ", %" PRId64 "] and [%" PRId64
                          ", %" PRId64 "])",
                          path, dtx_show(f->tensors[s[i - 1].idx].name).s, dtx_show(name).s, s[i - 1].begin, s[i - 1].end,
                          s[i].begin, s[i].end);
        else if (s[i].begin > pos && i == 0)
            st = dtx_fail(DTX_ERR_FORMAT,
                          "%s: hole in the data section: bytes [0, %" PRId64 ") before tensor '%s' belong to no tensor",
                          path, s[i].begin, dtx_show(name).s);
        else if (s[i].begin > pos)
            st = dtx_fail(DTX_ERR_FORMAT,
                          "%s: hole in the data section: bytes [%" PRId64 ", %" PRId64
                          ") between tensors '%s' and '%s' belong to no tensor",
                          path, pos, s[i].begin, dtx_show(f->tensors[s[i - 1].idx].name).s, dtx_show(name).s);
        pos = s[i].end;
    }
    free(s);
    if (st == DTX_OK && (uint64_t)pos != data_size)
        st = dtx_fail(DTX_ERR_FORMAT,
                      "%s: unused bytes [%" PRId64 ", %zu) at the end of the data section belong to no tensor", path,
                      pos, data_size);
    return st;
}

/* the characters cJSON takes into a number */
static int is_num_char(char c) {
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

/* A number token must be a plain integer: cJSON reads "2.0", "2e0" and "02"
 * as 2, but the format (and the reference reader) wants integer literals. */
static int plain_integer(const char *s, size_t n) {
    if (n == 0 || (s[0] == '0' && n > 1)) return 0; /* "-0" too: negatives were refused earlier */
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

/* Scans text that cJSON already accepted, remembering the last top-level key
 * so that the message can name the tensor. */
static dtx_status check_number_syntax(const char *path, const char *text, size_t n) {
    const char *key = "";
    size_t key_len = 0;
    int depth = 0;
    size_t i = 0;
    while (i < n) {
        char c = text[i];
        if (c == '"') {
            size_t s = ++i;
            while (i < n && text[i] != '"') i += (text[i] == '\\') ? 2 : 1;
            size_t e = i < n ? i : n;
            i = e + 1;
            size_t k = i;
            while (k < n && (unsigned char)text[k] <= ' ') k++; /* cJSON's idea of whitespace */
            if (depth == 1 && k < n && text[k] == ':') { key = text + s; key_len = e - s; }
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t s = i;
            while (i < n && is_num_char(text[i])) i++;
            if (!plain_integer(text + s, i - s))
                return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s': number '%s' is not a plain integer", path,
                                dtx_show_n(key, key_len).s, dtx_show_n(text + s, i - s).s);
        } else {
            if (c == '{' || c == '[') depth++;
            if (c == '}' || c == ']') depth--;
            i++;
        }
    }
    return DTX_OK;
}

/* Counts the tensor entries and finds __metadata__ (at most once). */
static dtx_status scan_root(const char *path, const cJSON *root, const cJSON **meta, size_t *n_tensors) {
    *meta = NULL;
    *n_tensors = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") != 0) { (*n_tensors)++; continue; }
        if (*meta) return dtx_fail(DTX_ERR_FORMAT, "%s: duplicate key '__metadata__'", path);
        *meta = c;
    }
    if (*n_tensors > (size_t)INT32_MAX) return dtx_fail(DTX_ERR_FORMAT, "%s: too many tensors", path);
    return DTX_OK;
}

static dtx_status parse_tensors(dtx_st_file *f, const char *path, const cJSON *root, size_t n, size_t hlen) {
    size_t data_size = f->file.size - 8 - hlen;
    const uint8_t *data = (const uint8_t *)f->file.data + 8 + hlen;
    f->tensors = dtx_calloc(n, sizeof *f->tensors);
    int64_t (*off)[2] = dtx_calloc(n, sizeof *off);
    if (!f->tensors || !off) { free(off); return DTX_ERR_NOMEM; }
    f->n_tensors = (int)n;
    dtx_status st = DTX_OK;
    size_t i = 0;
    for (const cJSON *c = root->child; c && st == DTX_OK; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) continue;
        st = parse_entry(path, c, data_size, &f->tensors[i], off[i]);
        i++;
    }
    if (st == DTX_OK) {
        const char **names = dtx_alloc(n, sizeof *names);
        if (!names) st = DTX_ERR_NOMEM;
        for (size_t k = 0; names && k < n; k++) names[k] = f->tensors[k].name;
        const char *dup = names ? find_duplicate(names, n, &st) : NULL;
        if (dup) st = dtx_fail(DTX_ERR_FORMAT, "%s: duplicate tensor name '%s'", path, dtx_show(dup).s);
        free(names);
    }
    if (st == DTX_OK) st = check_layout(f, path, (const int64_t(*)[2])off, data_size);
    for (size_t k = 0; st == DTX_OK && k < n; k++) f->tensors[k].data = data + off[k][0];
    free(off);
    return st;
}

dtx_status dtx_st_open(dtx_st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    dtx_status st = map_file(f, path);
    if (st != DTX_OK) return st;
    char *text = NULL;
    size_t hlen = 0;
    cJSON *root = NULL;
    st = parse_header(f, path, &text, &hlen, &root);
    const cJSON *meta = NULL;
    size_t n = 0;
    if (st == DTX_OK) st = scan_root(path, root, &meta, &n);
    if (st == DTX_OK && meta) st = parse_meta(f, path, meta);
    if (st == DTX_OK) st = parse_tensors(f, path, root, n, hlen);
    if (st == DTX_OK) st = check_number_syntax(path, text, hlen);
    cJSON_Delete(root);
    free(text);
    if (st == DTX_ERR_NOMEM) dtx_fail(st, "%s: out of memory while reading the header", path);
    if (st != DTX_OK) dtx_st_close(f);
    return st;
}

void dtx_st_close(dtx_st_file *f) {
    dtx_unmap_file(&f->file);
    for (int i = 0; f->tensors && i < f->n_tensors; i++) free(f->tensors[i].name);
    for (int i = 0; f->meta_keys && i < f->n_meta; i++) free(f->meta_keys[i]);
    for (int i = 0; f->meta_values && i < f->n_meta; i++) free(f->meta_values[i]);
    free(f->tensors);
    free(f->meta_keys);
    free(f->meta_values);
    memset(f, 0, sizeof *f);
}

const dtx_st_tensor *dtx_st_find(const dtx_st_file *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *dtx_st_meta(const dtx_st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

/* ------------------------------------------------------------------ writer */

/* A header string: the header's text (cJSON, which escapes names and
 * metadata), padded with spaces to a multiple of 8 bytes. */
typedef struct { char *p; size_t len; int failed; } sbuf;

/* [v0, v1, ...] as raw JSON text: exact integers (cJSON's numbers are doubles). */
static cJSON *int_array(const int64_t *v, int n) {
    char buf[32 * (DTX_ST_MAX_DIMS + 2)];
    size_t k = 0;
    buf[k++] = '[';
    for (int i = 0; i < n; i++) k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%" PRId64, i ? "," : "", v[i]);
    snprintf(buf + k, sizeof buf - k, "]");
    return cJSON_CreateRaw(buf);
}

/* Adds child under key; 0 (child freed) when that fails. */
static int add(cJSON *o, const char *key, cJSON *child) {
    if (child && cJSON_AddItemToObject(o, key, child)) return 1;
    cJSON_Delete(child);
    return 0;
}

/* Checks the caller's tensors and computes each one's byte size. */
/* The dtype a tensor is written in. */
static dtx_st_dtype out_dtype(const dtx_st_out *t, int bf16) { return t->raw ? t->raw_dtype : bf16 ? DTX_ST_BF16 : DTX_ST_F32; }

static dtx_status check_outputs(const char *path, const dtx_st_out *t, int n, int bf16, int64_t *nbytes) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (t[i].raw && t[i].raw_dtype != DTX_ST_F32 && t[i].raw_dtype != DTX_ST_I8 && t[i].raw_dtype != DTX_ST_U8)
            return dtx_fail(DTX_ERR_ARG, "%s: tensor %d: raw data must be F32, I8 or U8", path, i);
        size_t esize = dtype_sizes[out_dtype(&t[i], bf16)];
        if (!t[i].name || strcmp(t[i].name, "__metadata__") == 0)
            return dtx_fail(DTX_ERR_ARG, "%s: tensor %d has an invalid name", path, i);
        if (t[i].ndim < 0 || t[i].ndim > DTX_ST_MAX_DIMS)
            return dtx_fail(DTX_ERR_ARG, "%s: tensor '%s': ndim %d out of range", path, dtx_show(t[i].name).s, t[i].ndim);
        int64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) {
            int64_t s = t[i].shape[d];
            if (s < 0 || (s && numel > INT64_MAX / (int64_t)esize / s))
                return dtx_fail(DTX_ERR_ARG, "%s: tensor '%s': bad shape", path, dtx_show(t[i].name).s);
            numel *= s;
        }
        if (numel && !t[i].data && !t[i].raw)
            return dtx_fail(DTX_ERR_ARG, "%s: tensor '%s': no data", path, dtx_show(t[i].name).s);
        nbytes[i] = numel * (int64_t)esize;
        if (nbytes[i] > INT64_MAX - total) return dtx_fail(DTX_ERR_ARG, "%s: tensors too large", path);
        total += nbytes[i];
    }
    const char **names = dtx_alloc((size_t)n, sizeof *names);
    if (!names) return DTX_ERR_NOMEM;
    for (int i = 0; i < n; i++) names[i] = t[i].name;
    dtx_status st;
    const char *dup = find_duplicate(names, (size_t)n, &st);
    if (dup) st = dtx_fail(DTX_ERR_ARG, "%s: duplicate tensor name '%s'", path, dtx_show(dup).s);
    free(names);
    return st;
}

/* The order tensors are written in: wider elements first (F32, then BF16,
 * then bytes), each width in the caller's order, as Hugging Face's writer
 * does: with the data starting 8-aligned and no holes allowed, every
 * tensor's data then lies at a multiple of its element size, so a reader
 * can use it in place (a quantised file's F32 scales beside odd-sized
 * codes). */
static void write_order(int *ord, const dtx_st_out *t, int n, int bf16) {
    int k = 0;
    for (size_t w = 4; w >= 1; w /= 2)
        for (int i = 0; i < n; i++)
            if (dtype_sizes[out_dtype(&t[i], bf16)] == w) ord[k++] = i;
}

static void build_header(sbuf *b, const dtx_st_out *t, const int *ord, int n, const int64_t *nbytes,
                         const char *const *keys, const char *const *values, int n_meta, int bf16) {
    cJSON *root = cJSON_CreateObject(), *meta = n_meta > 0 ? cJSON_CreateObject() : NULL;
    int ok = root && (n_meta == 0 || add(root, "__metadata__", meta));
    for (int i = 0; ok && i < n_meta; i++) ok = cJSON_AddStringToObject(meta, keys[i], values[i]) != NULL;
    int64_t off = 0;
    for (int j = 0; ok && j < n; j++) {
        int i = ord[j];
        cJSON *o = cJSON_CreateObject();
        int64_t offs[2] = {off, off + nbytes[i]};
        ok = add(root, t[i].name, o) && cJSON_AddStringToObject(o, "dtype", dtype_names[out_dtype(&t[i], bf16)]) &&
             add(o, "shape", int_array(t[i].shape, t[i].ndim)) && add(o, "data_offsets", int_array(offs, 2));
        off += nbytes[i];
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    size_t len = text ? strlen(text) : 0, padded = (len + 7) / 8 * 8; /* 8 + padded: aligned data */
    char *p = text ? realloc(text, padded + 1) : NULL;
    if (!p) {
        free(text);
        b->failed = 1;
        return;
    }
    memset(p + len, ' ', padded - len);
    p[padded] = '\0';
    b->p = p;
    b->len = padded;
}

/* fwrite that reports errno (EIO if the C library left none). */
static int put(FILE *fp, const void *p, size_t n) {
    errno = 0;
    if (fwrite(p, 1, n, fp) == n) return 0;
    return errno ? errno : EIO;
}

/* Little-endian by construction: the bytes are stored one by one. */
static int put_tensor(FILE *fp, const dtx_st_out *t, int64_t numel, int bf16) {
    uint8_t buf[16384];
    if (t->raw && t->raw_dtype != DTX_ST_F32) return numel ? put(fp, t->raw, (size_t)numel) : 0; /* bytes */
    if (t->raw) { /* floats */
        const float *f = t->raw;
        for (int64_t i = 0; i < numel;) {
            size_t k = (size_t)(numel - i) < sizeof buf / 4 ? (size_t)(numel - i) : sizeof buf / 4;
            for (size_t j = 0; j < k; j++) {
                uint32_t u = dtx_f32_bits(f[i + (int64_t)j]);
                for (size_t b = 0; b < 4; b++) buf[j * 4 + b] = (uint8_t)(u >> (8 * b));
            }
            int e = put(fp, buf, k * 4);
            if (e) return e;
            i += (int64_t)k;
        }
        return 0;
    }
    size_t esize = bf16 ? 2 : 4, per = sizeof buf / esize;
    for (int64_t i = 0; i < numel;) {
        size_t k = (size_t)(numel - i) < per ? (size_t)(numel - i) : per;
        for (size_t j = 0; j < k; j++) {
            /* in the DTX_DOUBLE build BF16 rounds via float: a double
             * rounding that can differ from direct rounding only on ties */
            float v = (float)t->data[i + (int64_t)j];
            uint32_t u = bf16 ? dtx_f32_to_bf16(v) : dtx_f32_bits(v);
            for (size_t b = 0; b < esize; b++) buf[j * esize + b] = (uint8_t)(u >> (8 * b));
        }
        int e = put(fp, buf, k * esize);
        if (e) return e;
        i += (int64_t)k;
    }
    return 0;
}

static int put_file(FILE *fp, const sbuf *h, const dtx_st_out *t, const int *ord, int n, const int64_t *nbytes,
                    int bf16) {
    uint8_t len[8];
    for (int b = 0; b < 8; b++) len[b] = (uint8_t)((uint64_t)h->len >> (8 * b));
    int e = put(fp, len, 8);
    if (!e) e = put(fp, h->p, h->len);
    for (int j = 0; j < n && !e; j++)
        e = put_tensor(fp, &t[ord[j]], nbytes[ord[j]] / (int64_t)dtype_sizes[out_dtype(&t[ord[j]], bf16)], bf16);
    return e;
}

dtx_status dtx_st_write(const char *path, const dtx_st_out *tensors, int n_tensors, const char *const *meta_keys,
                        const char *const *meta_values, int n_meta, int bf16) {
    if (n_tensors < 0 || n_meta < 0 || (n_tensors && !tensors) || (n_meta && (!meta_keys || !meta_values)))
        return dtx_fail(DTX_ERR_ARG, "%s: bad tensor or metadata list", path);
    for (int i = 0; i < n_meta; i++)
        if (!meta_keys[i] || !meta_values[i]) return dtx_fail(DTX_ERR_ARG, "%s: metadata entry %d is NULL", path, i);
    int64_t *nbytes = dtx_alloc((size_t)n_tensors, sizeof *nbytes);
    int *ord = dtx_alloc((size_t)n_tensors, sizeof *ord);
    if (!nbytes || !ord) {
        free(nbytes), free(ord);
        return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", path);
    }
    dtx_status st = check_outputs(path, tensors, n_tensors, bf16, nbytes);
    sbuf h = {0};
    if (st == DTX_OK) {
        write_order(ord, tensors, n_tensors, bf16);
        build_header(&h, tensors, ord, n_tensors, nbytes, meta_keys, meta_values, n_meta, bf16);
        if (h.failed) st = dtx_fail(DTX_ERR_NOMEM, "%s: out of memory building the header", path);
    }
    dtx_atomic_file w;
    if (st == DTX_OK) st = dtx_atomic_open(&w, path);
    if (st == DTX_OK) st = dtx_atomic_commit(&w, put_file(w.fp, &h, tensors, ord, n_tensors, nbytes, bf16));
    free(h.p);
    free(nbytes);
    free(ord);
    return st;
}
