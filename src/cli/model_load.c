/* Model files, or the model inside a training checkpoint (cli.h). */
#include <stdio.h>

#include "cli/cli.h"
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
    return st;
}
