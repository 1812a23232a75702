/* difftx tokenizer info's report (difftx.h dtx_tokenizer_describe). */
#include <stdio.h>
#include <stdlib.h>

#include "common/json.h"
#include "difftx.h"

char *dtx_tokenizer_describe(const dtx_tokenizer *t, const char *path, int json) {
    int64_t v = dtx_tokenizer_vocab_size(t), ord = dtx_tokenizer_num_ordinary(t);
    int ns = dtx_tokenizer_num_special(t);
    if (json) {
        int ok = 1;
        cJSON *root = cJSON_CreateObject(), *sp = NULL;
        if (!root) ok = 0;
        else {
            jstr(root, "file", path, &ok);
            jstr(root, "source", dtx_tokenizer_source(t), &ok);
            jstr(root, "pattern", "cl100k_base", &ok);
            jint(root, "vocab_size", v, &ok);
            jint(root, "ordinary", ord, &ok);
            jint(root, "merges", ord - 256, &ok);
            sp = jadd(root, "special", cJSON_CreateObject(), &ok);
        }
        for (int i = 0; sp && i < ns; i++) {
            int32_t id;
            const char *name = dtx_tokenizer_special(t, i, &id);
            jint(sp, name, id, &ok);
        }
        if (root) jint(root, "unused_ids", v - ord - ns, &ok);
        return json_text(root, ok, 0);
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fprintf(f, "file        %s\n", path);
    fprintf(f, "source      %s\n", dtx_tokenizer_source(t));
    fprintf(f, "pattern     cl100k_base\n");
    fprintf(f, "vocab_size  %lld%s\n", (long long)v, v - ord - ns ? "  (some ids below it name no token)" : "");
    fprintf(f, "ordinary    %lld  (256 bytes + %lld merges)\n", (long long)ord, (long long)(ord - 256));
    fprintf(f, "special     %d\n", ns);
    for (int i = 0; i < ns; i++) {
        int32_t id;
        const char *name = dtx_tokenizer_special(t, i, &id);
        fprintf(f, "  %-16s %ld\n", name, (long)id);
    }
    return fclose(f) == 0 ? buf : (free(buf), NULL);
}
