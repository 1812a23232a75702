/* difftx tokenizer info's report (difftx.h dtx_tokenizer_describe). */
#include <stdio.h>
#include <stdlib.h>

#include "common/json.h"
#include "difftx.h"
#include "io/tokenizer.h"

/* How text is cut and merged, in a few words; and the merge count (-1: the
 * kind has no merge list). */
static const char *pattern_of(const dtx_tokenizer *t, int64_t *merges) {
    switch (t->source) {
    case DTX_TOKSRC_HF: *merges = dtx_hf_num_merges(t); return dtx_hf_describe_pattern(t);
    case DTX_TOKSRC_SPM: *merges = -1; return "none (SentencePiece BPE on the whole text, by piece score)";
    default: *merges = t->n_ranks - 256; return DTX_SPLIT_CL100K;
    }
}

char *dtx_tokenizer_describe(const dtx_tokenizer *t, const char *path, int json) {
    int64_t v = dtx_tokenizer_vocab_size(t), ord = dtx_tokenizer_num_ordinary(t), merges;
    int ns = dtx_tokenizer_num_special(t), n_special_ids = 0;
    for (int i = 0; i < ns; i++) n_special_ids += t->kind[t->special[i].id] == 2;
    const char *pattern = pattern_of(t, &merges);
    int64_t unused = v - ord - n_special_ids;
    if (json) {
        int ok = 1;
        cJSON *root = cJSON_CreateObject(), *sp = NULL;
        if (!root) ok = 0;
        else {
            jstr(root, "file", path, &ok);
            jstr(root, "source", dtx_tokenizer_source(t), &ok);
            jstr(root, "pattern", pattern, &ok);
            jint(root, "vocab_size", v, &ok);
            jint(root, "ordinary", ord, &ok);
            if (merges >= 0) jint(root, "merges", merges, &ok);
            if (t->bos >= 0) jint(root, "bos", t->bos, &ok);
            if (t->eos >= 0) jint(root, "eos", t->eos, &ok);
            sp = jadd(root, "special", cJSON_CreateObject(), &ok);
        }
        for (int i = 0; sp && i < ns; i++) {
            int32_t id;
            const char *name = dtx_tokenizer_special(t, i, &id);
            jint(sp, name, id, &ok);
        }
        if (root) jint(root, "unused_ids", unused, &ok);
        return json_text(root, ok, 0);
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fprintf(f, "file        %s\n", path);
    fprintf(f, "source      %s\n", dtx_tokenizer_source(t));
    fprintf(f, "pattern     %s\n", pattern);
    fprintf(f, "vocab_size  %lld%s\n", (long long)v, unused ? "  (some ids below it name no token)" : "");
    if (t->source == DTX_TOKSRC_HF)
        fprintf(f, "ordinary    %lld  (%lld merges)\n", (long long)ord, (long long)merges);
    else if (merges >= 0)
        fprintf(f, "ordinary    %lld  (256 bytes + %lld merges)\n", (long long)ord, (long long)merges);
    else
        fprintf(f, "ordinary    %lld  (pieces)\n", (long long)ord);
    if (t->bos >= 0 || t->eos >= 0) fprintf(f, "bos, eos    %ld, %ld  (-1: none)\n", (long)t->bos, (long)t->eos);
    fprintf(f, "special     %d%s\n", ns, t->source == DTX_TOKSRC_HF ? "  (added tokens; * not special)" : "");
    for (int i = 0; i < ns; i++) {
        int32_t id;
        const char *name = dtx_tokenizer_special(t, i, &id);
        dtx_shown s = dtx_show(name);
        fprintf(f, "  %-16s %ld%s\n", s.s, (long)id, dtx_tokenizer_special_is_special(t, i) ? "" : " *");
    }
    return fclose(f) == 0 ? buf : (free(buf), NULL);
}
