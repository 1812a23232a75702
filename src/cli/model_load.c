/* Model files, or the model inside a training checkpoint (cli.h). */
#include <stdio.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "common/common.h"
#include "train/checkpoint.h"

static dtx_status load(dtx_model **m, const char *path) {
    dtx_status st = dtx_model_load(m, path);
    if (st == DTX_OK) return DTX_OK;
    /* A checkpoint holds the model beside the optimizer state: evaluating
     * one is how a run is followed while it trains. Anything else keeps the
     * model reader's message, which names what is wrong with the file. */
    char why[1024];
    snprintf(why, sizeof why, "%s", dtx_last_error());
    dtx_ckpt ck;
    if (dtx_ckpt_load(&ck, path) == DTX_OK) {
        *m = ck.model;
        ck.model = NULL;
        dtx_ckpt_free(&ck);
        return DTX_OK;
    }
    return dtx_fail(st, "%s", why);
}

dtx_status cli_model_load(dtx_model **m, const char *path, int precision) {
    *m = NULL;
    dtx_status st = load(m, path);
    if (!st && (st = dtx_model_set_precision(*m, (dtx_precision)precision))) {
        dtx_model_free(*m);
        *m = NULL;
    }
    if (!st) cli_note_precision(precision);
    return st;
}

int cli_load_model_and_tokenizer(const char *cmd, const char *model, const char *tokenizer, int precision,
                                 dtx_model **m, dtx_tokenizer **tok) {
    *m = NULL;
    *tok = NULL;
    if (dtx_tokenizer_load(tok, tokenizer) != DTX_OK) return lib_error(cmd);
    if (cli_model_load(m, model, precision) != DTX_OK) return lib_error(cmd);
    int64_t vt = dtx_tokenizer_vocab_size(*tok), vm = dtx_model_config(*m)->vocab_size;
    if (vt > vm)
        return runtime_error(cmd, "the tokenizer %s has %lld tokens, more than the vocab_size %lld of the model %s",
                             tokenizer, (long long)vt, (long long)vm, model);
    /* A model's vocabulary may exceed its tokenizer's only by padding (rows no
     * id reaches, rounding the embedding up for speed); any other difference
     * means the two were not made together, and the model would read every id
     * as another token and answer nonsense. */
    if (vm != vt && vm != (vt + 63) / 64 * 64 && vm != (vt + 127) / 128 * 128)
        return runtime_error(cmd, "the tokenizer %s has %lld tokens and the model %s a vocab_size of %lld: not made "
                             "together (a model's vocabulary may exceed its tokenizer's only by padding to a "
                             "multiple of 64 or 128)", tokenizer, (long long)vt, model, (long long)vm);
    return EXIT_OK;
}

void cli_note_precision(int precision) {
    static int said;
    if (precision != DTX_PREC_BF16 || said) return;
    said = 1;
    int mm = dtx_matmul_bf16_native(), attn = dtx_isa_level() >= DTX_ISA_AVX512_BF16;
    if (mm && attn) return; /* native: nothing to say */
    fprintf(stderr,
            "difftx: note: bf16 is emulated here (ISA %s, %s %s): %s rounded to bf16, products and sums in fp32\n",
            dtx_isa_name(dtx_isa_level()), dtx_matmul_library(), dtx_matmul_isa_name(),
            mm == attn ? "the matmul and attention operands" : mm ? "the attention operands" : "the matmul operands");
}
