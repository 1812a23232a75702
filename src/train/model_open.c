/* Opening a model for use: a model file or a checkpoint's model, the note
 * on emulated bf16, and the tokenizer/model vocabulary match (difftx.h). */
#include <stdio.h>

#include "common/common.h"
#include "difftx.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "train/checkpoint.h"

int dtx_is_checkpoint(const char *path) {
    dtx_st_file f;
    if (dtx_st_open(&f, path) != DTX_OK) {
        dtx_clear_error();
        return 0;
    }
    int yes = dtx_st_meta(&f, "checkpoint_version") != NULL;
    dtx_st_close(&f);
    return yes;
}

dtx_status dtx_checkpoint_open(dtx_model **out, int64_t *step, const char *path) {
    *out = NULL;
    dtx_ckpt ck;
    dtx_status st = dtx_ckpt_load(&ck, path);
    if (st) return st;
    *out = ck.model;
    if (step) *step = ck.step;
    ck.model = NULL;
    dtx_ckpt_free(&ck);
    return DTX_OK;
}

static dtx_status load(dtx_model **m, const char *path) {
    dtx_status st = dtx_model_load(m, path);
    if (st == DTX_OK) return DTX_OK;
    /* A checkpoint holds the model beside the optimizer state: evaluating
     * one is how a run is followed while it trains. Anything else keeps the
     * model reader's message, which names what is wrong with the file. */
    char why[1024];
    snprintf(why, sizeof why, "%s", dtx_last_error());
    if (dtx_checkpoint_open(m, NULL, path) == DTX_OK) return DTX_OK;
    return dtx_fail(st, "%s", why);
}

dtx_status dtx_model_open(dtx_model **m, const char *path, dtx_precision precision) {
    *m = NULL;
    dtx_status st = dtx_is_hf_dir(path) ? dtx_hf_import(m, path) : load(m, path);
    if (st) return st;
    if ((st = dtx_model_settle_weights(*m)) || (st = dtx_model_set_precision(*m, precision))) {
        dtx_model_free(*m);
        *m = NULL;
    }
    return st;
}

dtx_status dtx_model_open_with_tokenizer(dtx_model **m, dtx_tokenizer **tok, const char *model_path,
                                         const char *tokenizer_path, dtx_precision precision) {
    *m = NULL;
    *tok = NULL;
    dtx_status st = dtx_tokenizer_load(tok, tokenizer_path);
    if (!st) st = dtx_model_open(m, model_path, precision);
    if (!st) st = dtx_tokenizer_check_model(*tok, *m, tokenizer_path, model_path);
    return st;
}

const char *dtx_precision_note(dtx_precision precision) {
    static _Thread_local char note[320];
    if (precision != DTX_PREC_BF16) return NULL;
    int mm = dtx_matmul_bf16_native(), attn = dtx_isa_level() >= DTX_ISA_AVX512_BF16;
    if (mm && attn) return NULL; /* native: nothing to say */
    snprintf(note, sizeof note, "bf16 is emulated here (ISA %s, %s %s): %s rounded to bf16, products and sums in fp32",
             dtx_isa_name(dtx_isa_level()), dtx_matmul_library(), dtx_matmul_isa_name(),
             mm == attn ? "the matmul and attention operands" : mm ? "the attention operands" : "the matmul operands");
    return note;
}

dtx_status dtx_tokenizer_check_model(const dtx_tokenizer *tok, const dtx_model *m, const char *tok_path,
                                     const char *model_path) {
    int64_t vt = dtx_tokenizer_vocab_size(tok), vm = dtx_model_config(m)->vocab_size;
    if (vt > vm)
        return dtx_fail(DTX_ERR_ARG, "the tokenizer %s has %lld tokens, more than the vocab_size %lld of the model %s",
                        tok_path, (long long)vt, (long long)vm, model_path);
    /* A model's vocabulary may exceed its tokenizer's only by padding (rows no
     * id reaches, rounding the embedding up for speed); any other difference
     * means the two were not made together, and the model would read every id
     * as another token and answer nonsense. */
    if (vm != vt && vm != (vt + 63) / 64 * 64 && vm != (vt + 127) / 128 * 128)
        return dtx_fail(DTX_ERR_ARG,
                        "the tokenizer %s has %lld tokens and the model %s a vocab_size of %lld: not made together (a "
                        "model's vocabulary may exceed its tokenizer's only by padding to a multiple of 64 or 128)",
                        tok_path, (long long)vt, model_path, (long long)vm);
    return DTX_OK;
}
