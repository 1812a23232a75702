/* difftx info: what a model file holds, and how it compares with its
 * parameter-matched baseline of the other architecture. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "difftx.h"

static const char *CMD = "info";

static const char USAGE[] =
    "usage: difftx info [--json] [--tensors] MODEL.safetensors|CHECKPOINT.safetensors|HF_DIR\n"
    "       difftx info --system [--json]\n"
    "\n"
    "Prints the architecture, every config value, the parameter count (total and\n"
    "without tok_embeddings/output), the parameter count of the parameter-matched\n"
    "baseline of the other architecture (DIFF with H heads, G KV heads <-> Transformer\n"
    "with 2H, 2G, in its default variant), and the difference: per layer the four lambda\n"
    "vectors (4 x head_dim) that only DIFF has, and the per-head norm weights (subln:\n"
    "2 x head_dim for DIFF, head_dim for a Transformer with --subln rms).\n"
    "\n"
    "A training checkpoint (difftx train's ckpt_*.safetensors) is read and checked\n"
    "whole, model and AdamW moments; its step is printed before the model's report.\n"
    "\n";

/* The library's report on stdout. */
static int print_report(char *text) {
    if (!text) return runtime_error(CMD, "out of memory building the report");
    fputs(text, stdout);
    free(text);
    return finish_stdout(CMD);
}

int cmd_info(int argc, char **argv) {
    int json = 0, tensors = 0, sys = 0;
    flag fl[] = {
        FLAG_BOOL("--json", &json, 1, .help = "one JSON object instead of text"),
        FLAG_BOOL("--tensors", &tensors, 1, .help = "also list every tensor with its shape"),
        FLAG_BOOL("--system", &sys, 1,
                  .help = "instead of a model: the CPU's instruction-set level, the level the kernels use "
                          "(DTX_ISA=portable|avx2|avx512|avx512bf16 caps it), oneDNN's ISA, and whether bf16 "
                          "products are native or emulated"),
    };
    const char *pos[1];
    int n_pos = 0;
    switch (flags_parse(CMD, USAGE, fl, (int)(sizeof fl / sizeof fl[0]), argc, argv, pos, 1, &n_pos)) {
    case FLAGS_HELP: return finish_stdout(CMD);
    case FLAGS_ERROR: return EXIT_USAGE;
    }
    if (sys) {
        if (n_pos || tensors) return usage_error(CMD, "--system takes no model file and no --tensors");
        return print_report(dtx_system_describe(json));
    }
    if (n_pos == 0) return usage_error(CMD, "expected a model file (see 'difftx info --help')");
    dtx_model *m = NULL;
    int64_t step = -1;
    if (dtx_is_checkpoint(pos[0]) ? dtx_checkpoint_open(&m, &step, pos[0]) : dtx_model_open(&m, pos[0], DTX_PREC_FP32))
        return lib_error(CMD);
    char *text = dtx_model_describe(m, pos[0], step, tensors, json);
    dtx_model_free(m);
    return print_report(text);
}
