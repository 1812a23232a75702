/* The one JSON builder: every JSON the library and the difftx command
 * print or write (the evaluations' reports, `info --json`, the training
 * log's lines) is built with cJSON through these helpers, so strings are escaped in one
 * place. The builders remember a failed allocation in *ok, so a document is
 * assembled without a check per call and written (or refused) once. */
#ifndef DTX_COMMON_JSON_H
#define DTX_COMMON_JSON_H

#include <stdint.h>
#include <cjson/cJSON.h>

/* A number, exact (the shortest text that reads back as v); NaN and
 * infinities (which JSON lacks) are written as null. */
void jnum(cJSON *o, const char *key, double v, int *ok);
/* An integer, exact at any size (cJSON's own numbers are doubles). */
void jint(cJSON *o, const char *key, int64_t v, int *ok);
void jstr(cJSON *o, const char *key, const char *v, int *ok);
void jbool(cJSON *o, const char *key, int v, int *ok);
void jnull(cJSON *o, const char *key, int *ok);
/* An array of n numbers printed with `digits` significant digits (17: the
 * doubles exactly, as jnum; 9: floats exactly) and null when not finite, as
 * one raw text: a large map costs its text, not a cJSON node per number. */
cJSON *jnum_array(const double *v, int64_t n, int digits);
/* Adds child to an object under key, or to an array when key is NULL; the
 * child, or NULL (child freed, *ok = 0) when that fails. */
cJSON *jadd(cJSON *parent, const char *key, cJSON *child, int *ok);
/* The text of root (indented when pretty) with a final newline; deletes
 * root. NULL when !ok or out of memory. */
char *json_text(cJSON *root, int ok, int pretty);
#endif
