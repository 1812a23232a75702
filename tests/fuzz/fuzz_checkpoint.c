/* Training checkpoints (src/train/checkpoint.h): the model, both AdamW
 * moments and the run's metadata, all checked on load. */
#include "fuzz.h"
#include "train/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dtx_ckpt ck;
    dtx_status st = dtx_ckpt_load(&ck, fuzz_path(data, size));
    if (st != DTX_OK) {
        fuzz_check(ck.model == NULL && ck.opt == NULL, "a failed load left state behind");
        fuzz_check(dtx_last_error()[0] != '\0', "a failed load without a message");
    } else {
        fuzz_check(ck.model && ck.opt && ck.step >= 0, "a loaded checkpoint without a model, optimizer or step");
    }
    dtx_ckpt_free(&ck);
    return 0;
}
