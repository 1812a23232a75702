/* Multi-needle retrieval prompts (spec §6.4): the haystack source, prompt
 * assembly, and the small statistics the eval commands share. The format and
 * every placement rule are described in needle.h. */
#include "eval/needle.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/common.h"

static const char FRAMING[] = "There is a special magic number inside a lot of irrelevant text. Find it and memorize "
                              "them. I will quiz you about the magic number there.\n";

/* Unique names (tested): YOCO's list repeats some, and a repeated city would
 * make two needles answer one question. ASCII only, so that a city's bytes
 * never split a UTF-8 character across tokens in odd ways. */
static const char *const CITIES[] = {
    "Tokyo",        "Delhi",       "Shanghai",     "Dhaka",        "Cairo",        "Beijing",
    "Mumbai",       "Osaka",       "Chongqing",    "Karachi",      "Istanbul",     "Kinshasa",
    "Lagos",        "Buenos Aires", "Kolkata",     "Manila",       "Tianjin",      "Guangzhou",
    "Rio de Janeiro", "Lahore",    "Bangalore",    "Shenzhen",     "Moscow",       "Chennai",
    "Bogota",       "Paris",       "Jakarta",      "Lima",         "Bangkok",      "Hyderabad",
    "Seoul",        "Nagoya",      "London",       "Chengdu",      "Nanjing",      "Tehran",
    "Ho Chi Minh City", "Luanda",  "Wuhan",        "Ahmedabad",    "Kuala Lumpur", "Hong Kong",
    "Riyadh",       "Baghdad",     "Santiago",     "Surat",        "Madrid",       "Pune",
    "Houston",      "Dallas",      "Toronto",      "Dar es Salaam", "Miami",       "Singapore",
    "Philadelphia", "Atlanta",     "Barcelona",    "Khartoum",     "Johannesburg", "Saint Petersburg",
    "Washington",   "Yangon",      "Alexandria",   "Guadalajara",  "Sydney",       "Melbourne",
    "Ankara",       "Monterrey",   "Abidjan",      "Chicago",      "Los Angeles",  "New York",
    "Boston",       "Phoenix",     "Seattle",      "San Francisco", "Berlin",      "Rome",
    "Athens",       "Lisbon",      "Vienna",       "Prague",       "Warsaw",       "Budapest",
    "Stockholm",    "Oslo",        "Helsinki",     "Copenhagen",   "Amsterdam",    "Brussels",
    "Dublin",       "Zurich",      "Geneva",       "Munich",       "Hamburg",      "Milan",
    "Naples",       "Kyiv",        "Casablanca",   "Nairobi",      "Addis Ababa",  "Accra",
    "Dakar",        "Cape Town",   "Auckland",     "Vancouver",    "Montreal",     "Havana",
    "Caracas",      "Quito",
};
enum { N_CITIES = sizeof CITIES / sizeof CITIES[0] };

int dtx_needle_num_cities(void) { return N_CITIES; }
const char *dtx_needle_city(int i) { return i >= 0 && i < N_CITIES ? CITIES[i] : NULL; }

void dtx_needle_question_text(const char *city, char *buf, size_t cap) {
    snprintf(buf, cap, "\nWhat is the special magic %s number? The special magic %s number is ", city, city);
}

/* ================================================================ source */

struct dtx_needle_source {
    const dtx_tokenizer *tok;
    int32_t bos;
    int32_t *tokens;     /* every unit's tokens, in order                   */
    int64_t n_tokens;
    int64_t *unit_start; /* unit i = tokens[unit_start[i], unit_start[i+1]) */
    int64_t n_units;
    int32_t *framing;
    int64_t framing_n;
};

enum { UNIT_SOFT_BYTES = 512, UNIT_HARD_BYTES = 1024 };

/* End (exclusive) of the unit that starts at b < len. */
static size_t unit_end(const char *t, size_t len, size_t b) {
    for (size_t i = b; i < len; i++) {
        char ch = t[i];
        if (ch == '\n') return i + 1;
        if ((ch == '.' || ch == '?' || ch == '!') && i + 1 < len && t[i + 1] == ' ') return i + 1;
        /* Text without sentence ends (lists, tables) would otherwise make one
         * huge unit and leave the depth placement nothing to choose from. */
        if (i - b >= UNIT_SOFT_BYTES && ch == ' ') return i;
        if (i - b >= UNIT_HARD_BYTES) return i;
    }
    return len;
}

/* The units of all texts, as (pointer, length) pairs. */
typedef struct {
    const char **p;
    size_t *len;
    int64_t n, cap;
} unit_list;

static dtx_status units_push(unit_list *u, const char *p, size_t len) {
    if (u->n == u->cap) {
        int64_t cap = u->cap ? 2 * u->cap : 1024;
        const char **np = realloc(u->p, (size_t)cap * sizeof *np);
        if (!np) return dtx_fail(DTX_ERR_NOMEM, "needle haystack: out of memory");
        u->p = np;
        size_t *nl = realloc(u->len, (size_t)cap * sizeof *nl);
        if (!nl) return dtx_fail(DTX_ERR_NOMEM, "needle haystack: out of memory");
        u->len = nl;
        u->cap = cap;
    }
    u->p[u->n] = p;
    u->len[u->n] = len;
    u->n++;
    return DTX_OK;
}

static dtx_status split_text(unit_list *u, const char *t, size_t len) {
    for (size_t b = 0; b < len;) {
        size_t e = unit_end(t, len, b);
        dtx_status st = units_push(u, t + b, e - b);
        if (st) return st;
        b = e;
    }
    return DTX_OK;
}

/* The haystack's files: each path a file, or a folder's files (dtx_paths_add). */
static dtx_status expand_paths(dtx_paths *l, const char *const *paths, int n_paths) {
    for (int i = 0; i < n_paths; i++) {
        size_t before = l->n;
        dtx_status st = dtx_paths_add(l, paths[i]);
        if (st) {
            char why[1024];
            snprintf(why, sizeof why, "%s", dtx_last_error());
            return dtx_fail(st, "needle haystack %s", why);
        }
        if (l->n == before) return dtx_fail(DTX_ERR_IO, "needle haystack %s: the folder holds no files", paths[i]);
    }
    return DTX_OK;
}

/* Encodes every unit (in parallel: the tokenizer is thread-safe) and packs
 * the tokens into s. */
static dtx_status encode_units(dtx_needle_source *s, const unit_list *u) {
    int32_t **ids = calloc((size_t)u->n, sizeof *ids);
    int64_t *cnt = calloc((size_t)u->n, sizeof *cnt);
    if (!ids || !cnt) {
        free(ids);
        free(cnt);
        return dtx_fail(DTX_ERR_NOMEM, "needle haystack: out of memory");
    }
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 256) reduction(| : failed)
    for (int64_t i = 0; i < u->n; i++)
        if (dtx_tokenizer_encode(s->tok, u->p[i], u->len[i], DTX_ENCODE_ORDINARY, &ids[i], &cnt[i]) != DTX_OK)
            failed = 1;
    dtx_status st = failed ? dtx_fail(DTX_ERR_NOMEM, "needle haystack: encoding the text failed") : DTX_OK;
    int64_t total = 0;
    for (int64_t i = 0; i < u->n; i++) total += cnt[i];
    if (!st) {
        s->tokens = malloc((size_t)(total ? total : 1) * sizeof *s->tokens);
        s->unit_start = malloc((size_t)(u->n + 1) * sizeof *s->unit_start);
        if (!s->tokens || !s->unit_start) st = dtx_fail(DTX_ERR_NOMEM, "needle haystack: out of memory");
    }
    int64_t at = 0, k = 0;
    for (int64_t i = 0; i < u->n; i++) {
        if (!st && cnt[i] > 0) { /* every non-empty text has tokens; keep the guard */
            memcpy(s->tokens + at, ids[i], (size_t)cnt[i] * sizeof *ids[i]);
            s->unit_start[k++] = at;
            at += cnt[i];
        }
        free(ids[i]);
    }
    free(ids);
    free(cnt);
    if (st) return st;
    s->unit_start[k] = at;
    s->n_units = k;
    s->n_tokens = at;
    return DTX_OK;
}

/* Reads the files (all kept until the units are encoded: units point into them). */
static dtx_status read_and_encode(dtx_needle_source *s, const dtx_paths *files) {
    char **texts = calloc((size_t)files->n, sizeof *texts);
    if (!texts) return dtx_fail(DTX_ERR_NOMEM, "needle haystack: out of memory");
    unit_list u = {0};
    dtx_status st = DTX_OK;
    for (size_t i = 0; i < files->n && st == DTX_OK; i++) {
        size_t len = 0;
        st = dtx_read_file(files->v[i], &texts[i], &len);
        if (!st) st = split_text(&u, texts[i], len);
    }
    if (!st) st = encode_units(s, &u);
    for (size_t i = 0; i < files->n; i++) free(texts[i]);
    free(texts);
    free(u.p);
    free(u.len);
    return st;
}

dtx_status dtx_needle_source_open(dtx_needle_source **out, const dtx_tokenizer *tok, const char *const *paths,
                                  int n_paths) {
    *out = NULL;
    if (n_paths < 1) return dtx_fail(DTX_ERR_ARG, "needle haystack: no files given");
    int32_t bos = dtx_tokenizer_bos(tok);
    if (bos < 0) return dtx_fail(DTX_ERR_ARG, "needle prompts: the tokenizer has no <|bos|> token");
    dtx_needle_source *s = calloc(1, sizeof *s);
    if (!s) return dtx_fail(DTX_ERR_NOMEM, "needle haystack: out of memory");
    s->tok = tok;
    s->bos = bos;
    dtx_paths files = {0};
    dtx_status st = expand_paths(&files, paths, n_paths);
    if (!st) st = read_and_encode(s, &files);
    if (!st && s->n_tokens == 0)
        st = dtx_fail(DTX_ERR_FORMAT, "needle haystack %s%s: no text (the files are empty)", paths[0],
                      n_paths > 1 || files.n > 1 ? " ..." : "");
    if (!st) st = dtx_tokenizer_encode(tok, FRAMING, strlen(FRAMING), DTX_ENCODE_ORDINARY, &s->framing, &s->framing_n);
    dtx_paths_free(&files);
    if (st) {
        dtx_needle_source_free(s);
        return st;
    }
    *out = s;
    return DTX_OK;
}

void dtx_needle_source_free(dtx_needle_source *s) {
    if (!s) return;
    free(s->tokens);
    free(s->unit_start);
    free(s->framing);
    free(s);
}

int64_t dtx_needle_source_tokens(const dtx_needle_source *s) { return s->n_tokens; }
int64_t dtx_needle_source_units(const dtx_needle_source *s) { return s->n_units; }

/* ================================================================ prompt */

/* The pieces of one prompt other than the haystack, encoded. */
typedef struct {
    int32_t *needle[DTX_NEEDLE_MAX];
    int64_t needle_n[DTX_NEEDLE_MAX];
    int32_t *answer[DTX_NEEDLE_MAX], *newline;
    int64_t answer_n[DTX_NEEDLE_MAX], newline_n;
} pieces;

static void pieces_free(pieces *p) {
    for (int i = 0; i < DTX_NEEDLE_MAX; i++) free(p->needle[i]);
    for (int q = 0; q < DTX_NEEDLE_MAX; q++) free(p->answer[q]);
    free(p->newline);
}

static dtx_status encode_str(const dtx_tokenizer *tok, const char *text, int32_t **ids, int64_t *n) {
    return dtx_tokenizer_encode(tok, text, strlen(text), DTX_ENCODE_ORDINARY, ids, n);
}

static dtx_status check_spec(const dtx_needle_spec *sp) {
    if (sp->n_needles < 1 || sp->n_needles > DTX_NEEDLE_MAX)
        return dtx_fail(DTX_ERR_ARG, "needle prompt: %d needles; must be 1 to %d", sp->n_needles, DTX_NEEDLE_MAX);
    if (sp->n_queries < 1 || sp->n_queries > sp->n_needles)
        return dtx_fail(DTX_ERR_ARG, "needle prompt: %d queries with %d needles; must be 1 to N", sp->n_queries,
                        sp->n_needles);
    if (isnan(sp->depth) || sp->depth > 1)
        return dtx_fail(DTX_ERR_ARG, "needle prompt: depth %g; must be in [0, 1] (or < 0 for random)", sp->depth);
    if (sp->length < 1) return dtx_fail(DTX_ERR_ARG, "needle prompt: length %lld; must be positive", (long long)sp->length);
    if (sp->with_answer != 0 && sp->with_answer != 1)
        return dtx_fail(DTX_ERR_ARG, "needle prompt: with_answer %d; must be 0 or 1", sp->with_answer);
    if (sp->no_question && sp->with_answer)
        return dtx_fail(DTX_ERR_ARG, "needle prompt: no_question and with_answer exclude each other");
    int lo = sp->city_lo;
    if (lo < 0 || N_CITIES - lo < sp->n_needles)
        return dtx_fail(DTX_ERR_ARG, "needle prompt: city_lo %d leaves fewer than %d cities", lo, sp->n_needles);
    if (!sp->answer_city != !sp->answer_number)
        return dtx_fail(DTX_ERR_ARG, "needle prompt: answer_city and answer_number go together");
    if (sp->answer_city) {
        int known = 0;
        for (int i = 0; i < N_CITIES; i++) known |= strcmp(CITIES[i], sp->answer_city) == 0;
        size_t n = strlen(sp->answer_number);
        int digits = n == 5;
        for (size_t i = 0; i < n; i++) digits &= sp->answer_number[i] >= '0' && sp->answer_number[i] <= '9';
        if (!known) return dtx_fail(DTX_ERR_ARG, "needle prompt: '%s' is not in the city list", sp->answer_city);
        if (!digits || sp->answer_number[0] == '0')
            return dtx_fail(DTX_ERR_ARG, "needle prompt: answer_number '%s' is not a 5-digit number", sp->answer_number);
    }
    return DTX_OK;
}

/* Cities from [city_lo, N_CITIES) without replacement (partial
 * Fisher-Yates), distinct numbers. A given answer city and number take
 * needle 0, and the other needles are drawn from the remaining cities.
 * Without them the draws are those of every earlier version. */
static void draw_needles(dtx_rng *r, const dtx_needle_spec *sp, dtx_needle_prompt *p) {
    int n = sp->n_needles, idx[N_CITIES], m = 0;
    for (int i = sp->city_lo; i < N_CITIES; i++)
        if (!sp->answer_city || strcmp(CITIES[i], sp->answer_city) != 0) idx[m++] = i;
    int given = sp->answer_city != NULL;
    if (given) snprintf(p->city[0], sizeof p->city[0], "%s", sp->answer_city);
    for (int i = given; i < n; i++) {
        int k = i - given, j = k + (int)(dtx_rng_next(r) % (uint64_t)(m - k));
        int t = idx[k];
        idx[k] = idx[j];
        idx[j] = t;
        snprintf(p->city[i], sizeof p->city[i], "%s", CITIES[idx[k]]);
    }
    int num[DTX_NEEDLE_MAX];
    if (given) num[0] = atoi(sp->answer_number);
    for (int i = given; i < n; i++) {
        int again;
        do { /* distinct, so that one number never answers two questions */
            num[i] = 10000 + (int)(dtx_rng_next(r) % 90000u);
            again = 0;
            for (int j = 0; j < i; j++) again |= num[j] == num[i];
        } while (again);
    }
    for (int i = 0; i < n; i++) snprintf(p->number[i], sizeof p->number[i], "%d", num[i]);
}

static dtx_status encode_pieces(const dtx_tokenizer *tok, const dtx_needle_spec *sp, dtx_needle_prompt *p,
                                pieces *pc) {
    char text[256];
    dtx_status st = DTX_OK;
    for (int i = 0; i < sp->n_needles && !st; i++) {
        snprintf(text, sizeof text, " The special magic %s number is: %s.", p->city[i], p->number[i]);
        st = encode_str(tok, text, &pc->needle[i], &pc->needle_n[i]);
    }
    for (int q = 0; q < sp->n_queries && !st; q++) {
        dtx_needle_question_text(p->city[q], text, sizeof text);
        st = encode_str(tok, text, &p->question[q], &p->question_n[q]);
    }
    for (int q = 0; q < sp->n_queries && !st && sp->with_answer; q++)
        st = encode_str(tok, p->number[q], &pc->answer[q], &pc->answer_n[q]);
    if (!st && sp->with_answer) st = encode_str(tok, "\n", &pc->newline, &pc->newline_n);
    return st;
}

/* Tokens that are not haystack; the budget check with the minimum in its message. */
static dtx_status fixed_tokens(const dtx_needle_source *s, const dtx_needle_spec *sp, const dtx_needle_prompt *p,
                               const pieces *pc, int64_t *fixed) {
    int64_t needles = 0, question = sp->no_question ? 0 : p->question_n[0], answer = 0;
    for (int i = 0; i < sp->n_needles; i++) needles += pc->needle_n[i];
    if (sp->no_question)
        ;
    else if (!sp->with_answer) /* every queried question must fit in length */
        for (int q = 1; q < sp->n_queries; q++) question = p->question_n[q] > question ? p->question_n[q] : question;
    else /* a training document asks all R questions, each answered */
        for (int q = 0; q < sp->n_queries; q++)
            answer += (q ? p->question_n[q] : 0) + pc->answer_n[q] + pc->newline_n;
    *fixed = 1 + s->framing_n + needles + question + answer;
    if (*fixed <= sp->length) return DTX_OK;
    char tail[64] = "";
    if (sp->with_answer) snprintf(tail, sizeof tail, " + answers (and further questions) %lld", (long long)answer);
    return dtx_fail(DTX_ERR_ARG,
                    "needle prompt: length %lld is too short: this prompt needs at least %lld tokens (BOS 1 + "
                    "framing %lld + %d needle%s %lld + question %lld%s) before any haystack; the minimum varies "
                    "a little with the cities and numbers drawn",
                    (long long)sp->length, (long long)*fixed, (long long)s->framing_n, sp->n_needles,
                    sp->n_needles == 1 ? "" : "s", (long long)needles, (long long)question, tail);
}

/* The haystack: a run of units from a random start, wrapping round the
 * source, the last cut to fill exactly H tokens. unit_from[j] / unit_n[j]:
 * unit j's tokens in the source. */
typedef struct {
    int64_t *from, *n;
    int64_t k; /* units */
} hay;

static dtx_status pick_haystack(const dtx_needle_source *s, dtx_rng *r, int64_t H, hay *h) {
    int64_t u = (int64_t)(dtx_rng_next(r) % (uint64_t)s->n_units), cap = 64;
    h->k = 0;
    h->from = malloc((size_t)cap * sizeof *h->from);
    h->n = malloc((size_t)cap * sizeof *h->n);
    for (int64_t got = 0; got < H; u = (u + 1) % s->n_units) {
        if (!h->from || !h->n) return dtx_fail(DTX_ERR_NOMEM, "needle prompt: out of memory");
        if (h->k == cap) {
            cap *= 2;
            int64_t *nf = realloc(h->from, (size_t)cap * sizeof *nf);
            if (nf) h->from = nf;
            int64_t *nn = realloc(h->n, (size_t)cap * sizeof *nn);
            if (nn) h->n = nn;
            if (!nf || !nn) return dtx_fail(DTX_ERR_NOMEM, "needle prompt: out of memory");
        }
        int64_t len = s->unit_start[u + 1] - s->unit_start[u];
        if (len > H - got) len = H - got;
        h->from[h->k] = s->unit_start[u];
        h->n[h->k++] = len;
        got += len;
    }
    if (!h->from || !h->n) return dtx_fail(DTX_ERR_NOMEM, "needle prompt: out of memory");
    return DTX_OK;
}

/* The boundary (0..k) nearest depth × H; the earlier one on a tie. */
static int64_t depth_boundary(const hay *h, int64_t H, double depth) {
    double target = depth * (double)H, best_d = INFINITY;
    int64_t best = 0, off = 0;
    for (int64_t j = 0; j <= h->k; j++) {
        double d = fabs((double)off - target);
        if (d < best_d) {
            best_d = d;
            best = j;
        }
        if (j < h->k) off += h->n[j];
    }
    return best;
}

static void put(int32_t *dst, int64_t *at, const int32_t *src, int64_t n) {
    memcpy(dst + *at, src, (size_t)n * sizeof *src);
    *at += n;
}

/* Needles at boundary j, in the order needle.h describes. */
static void put_needles(int32_t *dst, int64_t *at, const pieces *pc, dtx_needle_prompt *p, const int64_t *where,
                        int64_t j, int64_t k) {
    int answer_first = 2 * where[0] <= k;
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < p->n_needles; i++) {
            int take = where[i] == j && (pass == 1 ? i != 0 : (i == 0 && (pass == 0) == answer_first));
            if (!take) continue;
            p->needle_begin[i] = *at;
            put(dst, at, pc->needle[i], pc->needle_n[i]);
            p->needle_end[i] = *at;
        }
}

static dtx_status assemble(const dtx_needle_source *s, const dtx_needle_spec *sp, dtx_rng *r, const pieces *pc,
                           int64_t fixed, dtx_needle_prompt *p) {
    int64_t H = sp->length - fixed;
    hay h = {0};
    dtx_status st = pick_haystack(s, r, H, &h);
    int64_t where[DTX_NEEDLE_MAX];
    if (!st) {
        where[0] = sp->depth < 0 ? (int64_t)(dtx_rng_next(r) % (uint64_t)(h.k + 1)) : depth_boundary(&h, H, sp->depth);
        for (int i = 1; i < sp->n_needles; i++) where[i] = (int64_t)(dtx_rng_next(r) % (uint64_t)(h.k + 1));
        p->tokens = malloc((size_t)sp->length * sizeof *p->tokens);
        if (!p->tokens) st = dtx_fail(DTX_ERR_NOMEM, "needle prompt: out of memory");
    }
    if (st) {
        free(h.from);
        free(h.n);
        return st;
    }
    int64_t at = 0;
    p->tokens[at++] = s->bos;
    put(p->tokens, &at, s->framing, s->framing_n);
    p->haystack_begin = at;
    for (int64_t j = 0; j <= h.k; j++) {
        put_needles(p->tokens, &at, pc, p, where, j, h.k);
        if (j < h.k) put(p->tokens, &at, s->tokens + h.from[j], h.n[j]);
    }
    p->context_end = at;
    if (!sp->no_question) put(p->tokens, &at, p->question[0], p->question_n[0]);
    for (int q = 0; q < sp->n_queries && sp->with_answer; q++) {
        if (q) put(p->tokens, &at, p->question[q], p->question_n[q]);
        if (!q) p->answer_begin = at;
        put(p->tokens, &at, pc->answer[q], pc->answer_n[q]);
        if (!q) p->answer_end = at;
        put(p->tokens, &at, pc->newline, pc->newline_n);
    }
    p->n = at;
    free(h.from);
    free(h.n);
    return DTX_OK;
}

dtx_status dtx_needle_make(const dtx_needle_source *s, const dtx_needle_spec *sp, dtx_needle_prompt *out) {
    memset(out, 0, sizeof *out);
    dtx_status st = check_spec(sp);
    if (st) return st;
    out->n_needles = sp->n_needles;
    out->n_queries = sp->n_queries;
    dtx_rng r;
    dtx_rng_seed(&r, sp->seed);
    draw_needles(&r, sp, out);
    pieces pc = {0};
    int64_t fixed = 0;
    st = encode_pieces(s->tok, sp, out, &pc);
    if (!st) st = fixed_tokens(s, sp, out, &pc, &fixed);
    if (!st) st = assemble(s, sp, &r, &pc, fixed, out);
    pieces_free(&pc);
    if (st) dtx_needle_prompt_free(out);
    return st;
}

void dtx_needle_prompt_free(dtx_needle_prompt *p) {
    if (!p) return;
    free(p->tokens);
    for (int q = 0; q < DTX_NEEDLE_MAX; q++) free(p->question[q]);
    memset(p, 0, sizeof *p);
}

/* ================================================================ statistics */

void dtx_wilson95(int64_t k, int64_t n, double *lo, double *hi) {
    if (n <= 0) {
        *lo = 0;
        *hi = 1;
        return;
    }
    const double z = 1.96;
    double nn = (double)n, p = (double)k / nn, z2 = z * z;
    double den = 1 + z2 / nn;
    double centre = (p + z2 / (2 * nn)) / den;
    double half = z / den * sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn));
    *lo = centre - half < 0 ? 0 : centre - half;
    *hi = centre + half > 1 ? 1 : centre + half;
}

uint64_t dtx_needle_cell_seed(uint64_t seed, int n_needles, int n_queries, int64_t length, double depth_pct,
                              int64_t sample) {
    /* The depth's value, not its index in the list: asking for one depth
     * alone reproduces that depth's prompts of a full grid. */
    uint64_t parts[] = {(uint64_t)n_needles, (uint64_t)n_queries, (uint64_t)length,
                        (uint64_t)(int64_t)llround(depth_pct * 100), (uint64_t)sample};
    uint64_t h = dtx_mix64(seed);
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) h = dtx_mix64(h ^ parts[i]);
    return h;
}

int dtx_needle_answer_correct(const char *text, size_t len, const char *number) {
    size_t m = strlen(number);
    return m > 0 && memmem(text, len, number, m) != NULL;
}

dtx_status dtx_needle_source_open_list(dtx_needle_source **out, const dtx_tokenizer *tok, const char *list) {
    *out = NULL;
    char *copy = strdup(list);
    int n = 1;
    for (const char *c = list; *c; c++) n += *c == ',';
    const char **paths = malloc((size_t)n * sizeof *paths);
    if (!copy || !paths) {
        free(copy);
        free(paths);
        return dtx_fail(DTX_ERR_NOMEM, "needle haystack: out of memory");
    }
    int k = 0;
    for (char *p = copy, *save = NULL, *item; (item = strtok_r(p, ",", &save)); p = NULL) paths[k++] = item;
    dtx_status st = k ? dtx_needle_source_open(out, tok, paths, k)
                      : dtx_fail(DTX_ERR_ARG, "needle haystack: no paths in '%s'", list);
    free(paths);
    free(copy);
    return st;
}

int dtx_eval_parse_list(const char *s, double *out, int cap) {
    int n = 0;
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        if (len == 0 || len >= sizeof item) return -1;
        memcpy(item, p, len);
        item[len] = '\0';
        char *end;
        errno = 0;
        double v = strtod(item, &end);
        /* strtod skips leading space and takes "nan"; a list item may not. */
        if (*end != '\0' || isspace((unsigned char)item[0]) || !isfinite(v) || errno == ERANGE) return -1;
        if (n == cap) return -2;
        out[n++] = v;
        if (!comma) return n;
        p = comma + 1;
    }
}
