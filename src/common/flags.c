/* The table flag parser (difftx.h "flags"): the difftx command's flags and
 * dtx_eval_run's options. Messages go to dtx_last_error with DTX_ERR_USAGE;
 * the command prints them as "difftx <cmd>: <message>". */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "difftx.h"

typedef dtx_flag flag;

/* strtoll/strtod skip leading space and accept an empty tail; we do not. */
static int plain_start(const char *s) { return s[0] != '\0' && !isspace((unsigned char)s[0]); }

int dtx_parse_i64(const char *s, int64_t *out) {
    if (!plain_start(s)) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end != '\0') return -1;
    *out = (int64_t)v;
    return 0;
}

int dtx_flags_int_list(const char *name, const char *s, int64_t lo, int64_t hi, int64_t *out, int cap) {
    int n = 0;
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        int64_t v = 0;
        int ok = len > 0 && len < sizeof item;
        if (ok) {
            memcpy(item, p, len);
            item[len] = '\0';
            ok = dtx_parse_i64(item, &v) == 0 && v >= lo && v <= hi;
        }
        if (!ok || n == cap) {
            dtx_fail(DTX_ERR_USAGE, "%s: expected comma-separated integers in [%lld, %lld] (at most %d), got '%s'",
                     name, (long long)lo, (long long)hi, cap, s);
            return -1;
        }
        for (int j = 0; j < n; j++)
            if (out[j] == v) {
                dtx_fail(DTX_ERR_USAGE, "%s: '%s' repeats a value", name, s);
                return -1;
            }
        out[n++] = v;
        if (!comma) return n;
        p = comma + 1;
    }
}

static int parse_u64(const char *s, uint64_t *out) {
    /* strtoull would wrap "-1" to 2^64-1. */
    if (!plain_start(s) || s[0] == '-') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end != '\0') return -1;
    *out = (uint64_t)v;
    return 0;
}

int dtx_parse_f64(const char *s, double *out) {
    if (!plain_start(s)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    /* ERANGE on underflow still gives a usable tiny number; only overflow,
     * nan and inf are refused. */
    if (*end != '\0' || !isfinite(v) || (errno == ERANGE && fabs(v) > 1)) return -1;
    *out = v;
    return 0;
}

/* "a positive integer", "an integer in [2, 8]", ... for error messages. */
static void describe_int(const flag *f, char *buf, size_t cap) {
    const char *what = f->imin == 1 ? "a positive integer" : f->imin == 0 ? "a non-negative integer" : NULL;
    if (what && f->imax == INT64_MAX) snprintf(buf, cap, "%s", what);
    else if (what) snprintf(buf, cap, "%s up to %lld", what, (long long)f->imax);
    else snprintf(buf, cap, "an integer in [%lld, %lld]", (long long)f->imin, (long long)f->imax);
}

static void describe_real(const flag *f, char *buf, size_t cap) {
    if (isinf(f->dmax)) snprintf(buf, cap, "a number %s %g", f->dmin_open ? ">" : ">=", f->dmin);
    else snprintf(buf, cap, "a number in %c%g, %g%c", f->dmin_open ? '(' : '[', f->dmin, f->dmax, f->dmax_open ? ')' : ']');
}

static int real_in_range(const flag *f, double v) {
    int lo_ok = f->dmin_open ? v > f->dmin : v >= f->dmin;
    int hi_ok = f->dmax_open ? v < f->dmax : v <= f->dmax;
    return lo_ok && hi_ok;
}

/* Index of val among the '|'-separated choices, -1 if absent. */
static int choice_index(const char *choices, const char *val) {
    size_t n = strlen(val);
    int i = 0;
    for (const char *p = choices; *p; i++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, val, n) == 0) return i;
        if (!bar) break;
        p = bar + 1;
    }
    return -1;
}

/* Checks and stores one value; -1 with the message if bad. */
static int store(flag *f, const char *val) {
    char want[96];
    switch (f->kind) {
    case DTX_FL_BOOL:
        return dtx_fail(DTX_ERR_USAGE, "%s: takes no value", f->name), -1;
    case DTX_FL_I64: {
        int64_t v;
        if (dtx_parse_i64(val, &v) == 0 && v >= f->imin && v <= f->imax) { *(int64_t *)f->dst = v; return 0; }
        describe_int(f, want, sizeof want);
        break;
    }
    case DTX_FL_U64: {
        uint64_t v;
        if (parse_u64(val, &v) == 0) { *(uint64_t *)f->dst = v; return 0; }
        snprintf(want, sizeof want, "a non-negative integer below 2^64");
        break;
    }
    case DTX_FL_F64: {
        double v;
        if (dtx_parse_f64(val, &v) == 0 && real_in_range(f, v)) { *(double *)f->dst = v; return 0; }
        describe_real(f, want, sizeof want);
        break;
    }
    case DTX_FL_STR:
        if (val[0]) { *(const char **)f->dst = val; return 0; }
        snprintf(want, sizeof want, "a non-empty value");
        break;
    case DTX_FL_CHOICE: {
        int i = choice_index(f->choices, val);
        if (i >= 0) { *(int *)f->dst = i; return 0; }
        snprintf(want, sizeof want, "one of %s", f->choices);
        break;
    }
    }
    dtx_fail(DTX_ERR_USAGE, "%s: expected %s, got '%s'", f->name, want, val);
    return -1;
}

static flag *lookup(flag *fl, int n_fl, const char *name, size_t len) {
    for (int i = 0; i < n_fl; i++)
        if (fl[i].name && strlen(fl[i].name) == len && strncmp(fl[i].name, name, len) == 0) return &fl[i];
    return NULL;
}

flag *dtx_flags_get(flag *fl, int n_fl, const char *name) { return lookup(fl, n_fl, name, strlen(name)); }

/* Handles argv[*i], a "--name" or "--name=value"; advances *i past a value. */
static int parse_one(const char *cmd, flag *fl, int n_fl, int argc, char **argv, int *i) {
    const char *arg = argv[*i];
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    flag *f = lookup(fl, n_fl, arg, len);
    if (!f) {
        dtx_fail(DTX_ERR_USAGE, "unknown flag '%.*s' (see 'difftx %s --help')", (int)len, arg, cmd);
        return -1;
    }
    f->seen = 1;
    if (f->kind == DTX_FL_BOOL) {
        if (eq) { dtx_fail(DTX_ERR_USAGE, "%s: takes no value, got '%s'", f->name, eq + 1); return -1; }
        *(int *)f->dst = f->set_to;
        return 0;
    }
    if (eq) return store(f, eq + 1);
    /* A following "--flag" means the value was forgotten; negative numbers
     * ("-1") still reach store() and get a range message. */
    if (*i + 1 >= argc || (argv[*i + 1][0] == '-' && argv[*i + 1][1] == '-' && argv[*i + 1][2])) {
        dtx_fail(DTX_ERR_USAGE, "%s: missing value", f->name);
        return -1;
    }
    *i += 1;
    return store(f, argv[*i]);
}

int dtx_flags_want_help(int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
    return 0;
}

int dtx_flags_parse(const char *cmd, flag *fl, int n_fl, int argc, char **argv, const char **pos, int max_pos,
                    int *n_pos) {
    int np = 0, only_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) return DTX_FLAGS_HELP;
        if (!only_pos && strcmp(a, "--") == 0) { only_pos = 1; continue; }
        if (!only_pos && a[0] == '-' && a[1] != '\0') {
            if (parse_one(cmd, fl, n_fl, argc, argv, &i) != 0) return DTX_FLAGS_ERROR;
            continue;
        }
        if (np == max_pos) {
            dtx_fail(DTX_ERR_USAGE, "unexpected argument '%s' (see 'difftx %s --help')", a, cmd);
            return DTX_FLAGS_ERROR;
        }
        pos[np++] = a;
    }
    if (n_pos) *n_pos = np;
    for (int i = 0; i < n_fl; i++)
        if (fl[i].name && fl[i].required && !fl[i].seen)
            return dtx_fail(DTX_ERR_USAGE, "%s is required", fl[i].name), DTX_FLAGS_ERROR;
    return DTX_FLAGS_OK;
}

/* ------------------------------------------------------------ usage */

enum { USAGE_WIDTH = 80, HELP_COL = 24 };

/* The value a flag holds before parsing, when worth saying: "" otherwise
 * (zero, negative and NULL mean "off", "from the model" or "not given",
 * which the words say; a required flag has none). */
static void default_of(const flag *f, char *buf, size_t cap) {
    buf[0] = '\0';
    if (!f->dst || (f->help && (strstr(f->help, "default") || strstr(f->help, "[required]")))) return;
    switch (f->kind) {
    case DTX_FL_I64: /* a negative value is a "not given" mark */
        if (*(const int64_t *)f->dst > 0) snprintf(buf, cap, "%lld", (long long)*(const int64_t *)f->dst);
        break;
    case DTX_FL_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)f->dst); break;
    case DTX_FL_F64:
        if (*(const double *)f->dst != 0) dtx_format_real(*(const double *)f->dst, buf, cap);
        break;
    case DTX_FL_STR:
        if (*(const char *const *)f->dst) snprintf(buf, cap, "%s", *(const char *const *)f->dst);
        break;
    case DTX_FL_CHOICE: {
        int k = *(const int *)f->dst;
        const char *p = f->choices;
        for (; k > 0 && p; k--) p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL;
        if (p) snprintf(buf, cap, "%.*s", (int)(strchr(p, '|') ? (size_t)(strchr(p, '|') - p) : strlen(p)), p);
        break;
    }
    case DTX_FL_BOOL: break;
    }
}

/* text from column col on, wrapped at USAGE_WIDTH, every further line
 * indented to HELP_COL. */
static void put_wrapped(FILE *f, const char *text, int col) {
    int first = 1; /* the first word of a line goes where the line stands */
    for (const char *p = text; *p;) {
        while (*p == ' ') p++;
        const char *w = p;
        while (*p && *p != ' ') p++;
        int len = (int)(p - w);
        if (!len) break;
        if (!first && col + 1 + len > USAGE_WIDTH) {
            fprintf(f, "\n%*s", HELP_COL, "");
            col = HELP_COL;
            first = 1;
        }
        if (!first) fputc(' ', f), col++;
        fprintf(f, "%.*s", len, w);
        col += len;
        first = 0;
    }
    fputc('\n', f);
}

char *dtx_flags_usage(const char *head, const dtx_flag *fl, int n_fl) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fputs(head, f);
    for (int i = 0; i < n_fl; i++) {
        const flag *e = &fl[i];
        if (!e->name) { /* a heading or a note, as written */
            fputs(e->help ? e->help : "", f);
            continue;
        }
        if (!e->help) continue; /* a test hook */
        const char *meta = e->metavar ? e->metavar : e->kind == DTX_FL_CHOICE ? e->choices : NULL;
        int col = fprintf(f, "  %s%s%s", e->name, meta && e->kind != DTX_FL_BOOL ? " " : "",
                          meta && e->kind != DTX_FL_BOOL ? meta : "");
        if (col <= HELP_COL - 2) col += fprintf(f, "%*s", HELP_COL - col, "");
        else col += fprintf(f, "  ");
        char def[96], text[1024];
        default_of(e, def, sizeof def);
        if (e->required) snprintf(text, sizeof text, "%s [required]", e->help);
        else snprintf(text, sizeof text, "%s%s%s%s", e->help, def[0] ? " (default " : "", def, def[0] ? ")" : "");
        /* a long name and value: the words start on the next line */
        if (col > USAGE_WIDTH - 20) {
            fprintf(f, "\n%*s", HELP_COL, "");
            col = HELP_COL;
        }
        put_wrapped(f, text, col);
    }
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
