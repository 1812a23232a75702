/* Model files (safetensors: F32, BF16, F16 and the quantised formats, the
 * config in __metadata__): a file either loads, with a config that
 * validates, or is refused with a message and nothing left allocated. */
#include "difftx.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dtx_model *m = NULL;
    if (dtx_model_load(&m, fuzz_path(data, size)) != DTX_OK) {
        fuzz_check(m == NULL, "a failed load left a model");
        fuzz_check(dtx_last_error()[0] != '\0', "a failed load without a message");
        return 0;
    }
    fuzz_check(dtx_config_validate(dtx_model_config(m)) == DTX_OK, "a loaded model's config does not validate: %s",
               dtx_last_error());
    dtx_model_free(m);
    return 0;
}
