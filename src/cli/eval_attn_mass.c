/* difftx eval: placeholder until the measurement lands. */
#include "cli/cli.h"
#include "cli/flags.h"

int cmd_eval_attn_mass(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return runtime_error("eval", "not implemented yet");
}
