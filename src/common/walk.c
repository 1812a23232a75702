/* The files a path names (common.h: dtx_paths_add): the one meaning of "a
 * folder" for every command that reads text from files. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"

enum { MAX_DEPTH = 32 };

static dtx_status push(dtx_paths *p, char *s) {
    if (!s) return dtx_fail(DTX_ERR_NOMEM, "out of memory listing files");
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        char **nv = realloc(p->v, cap * sizeof *nv);
        if (!nv) {
            free(s);
            return dtx_fail(DTX_ERR_NOMEM, "out of memory listing files");
        }
        p->v = nv;
        p->cap = cap;
    }
    p->v[p->n++] = s;
    return DTX_OK;
}

static int cmp_str(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

static dtx_status add(dtx_paths *out, const char *path, int depth) {
    struct stat sb;
    if (stat(path, &sb) != 0) return dtx_fail(DTX_ERR_IO, "%s: %s", path, strerror(errno));
    if (S_ISREG(sb.st_mode)) return push(out, strdup(path));
    if (!S_ISDIR(sb.st_mode)) /* a socket or FIFO inside a folder is skipped; named, it is an error */
        return depth ? DTX_OK : dtx_fail(DTX_ERR_IO, "%s: neither a file nor a folder", path);
    if (depth >= MAX_DEPTH) return dtx_fail(DTX_ERR_IO, "%s: folders nested deeper than %d (a link loop?)", path, MAX_DEPTH);
    DIR *d = opendir(path);
    if (!d) return dtx_fail(DTX_ERR_IO, "%s: %s", path, strerror(errno));
    dtx_paths names = {0};
    dtx_status st = DTX_OK;
    for (struct dirent *e; st == DTX_OK && (e = readdir(d));)
        if (e->d_name[0] != '.') st = push(&names, strdup(e->d_name));
    closedir(d);
    if (st == DTX_OK && names.n) qsort(names.v, names.n, sizeof *names.v, cmp_str);
    size_t plen = strlen(path);
    int slash = plen > 0 && path[plen - 1] == '/';
    for (size_t i = 0; i < names.n && st == DTX_OK; i++) {
        size_t len = plen + strlen(names.v[i]) + 2;
        char *child = malloc(len);
        if (!child) {
            st = dtx_fail(DTX_ERR_NOMEM, "out of memory listing files");
            break;
        }
        snprintf(child, len, "%s%s%s", path, slash ? "" : "/", names.v[i]);
        st = add(out, child, depth + 1);
        free(child);
    }
    dtx_paths_free(&names);
    return st;
}

dtx_status dtx_paths_add(dtx_paths *out, const char *path) { return add(out, path, 0); }

void dtx_paths_free(dtx_paths *p) {
    for (size_t i = 0; i < p->n; i++) free(p->v[i]);
    free(p->v);
    memset(p, 0, sizeof *p);
}
