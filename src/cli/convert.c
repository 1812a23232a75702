/* difftx convert: Hugging Face checkpoint folders in and out
 * (docs/huggingface.md). The mapping is the library's (dtx_hf_import,
 * dtx_hf_export); this file keeps the flags and the summary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "difftx.h"

static const char *CMD = "convert";

static const char USAGE[] =
    "usage: difftx convert --from hf DIR --out MODEL.safetensors [--bf16]\n"
    "       difftx convert --to hf MODEL --out DIR [--bf16] [--shard-mb N]\n"
    "       difftx convert --to-diff MODEL --out DIFF.safetensors [--seed N]\n"
    "\n"
    "--from hf reads a Hugging Face checkpoint folder (config.json and\n"
    "model.safetensors, or model.safetensors.index.json and its shards):\n"
    "DiffLlamaForCausalLM becomes a diff model, LlamaForCausalLM a transformer,\n"
    "computing the same logits. --to hf writes a difftx model as such a folder,\n"
    "which transformers loads. Every other command also reads a folder directly.\n"
    "--to-diff turns a Transformer (a difftx model, or a Llama folder) into a DIFF\n"
    "model computing the same logits, to continue with difftx train --init.\n"
    "\n";

static void summary(const char *what, const char *path, const dtx_model *m) {
    const dtx_config *c = dtx_model_config(m);
    int diff = c->arch == DTX_ARCH_DIFF;
    printf("%s %s: %s (Hugging Face %s), dim %lld, layers %lld, heads %lld, kv heads %lld (Hugging Face: %lld and "
           "%lld), vocab %lld, %zu parameters\n",
           what, path, dtx_arch_name(c->arch), diff ? "DiffLlamaForCausalLM" : "LlamaForCausalLM", (long long)c->dim,
           (long long)c->n_layers, (long long)c->n_heads, (long long)c->n_kv_heads,
           (long long)(diff ? 2 : 1) * c->n_heads, (long long)(diff ? 2 : 1) * c->n_kv_heads,
           (long long)c->vocab_size, dtx_model_num_params(m));
}

/* --to-diff: the DIFF model of a Transformer, with the parameter counts beside it. */
static int to_diff(const char *path, const char *out, int bf16, uint64_t seed) {
    dtx_model *t = NULL, *m = NULL;
    if (dtx_model_open(&t, path, DTX_PREC_FP32) != DTX_OK) return lib_error(CMD);
    int rc = dtx_model_to_diff(&m, t, seed) == DTX_OK && dtx_model_save(m, out, bf16) == DTX_OK ? EXIT_OK
                                                                                            : lib_error(CMD);
    if (rc == EXIT_OK) {
        const dtx_config *c = dtx_model_config(m);
        dtx_config matched = dtx_config_baseline(dtx_model_config(t));
        char sizes[96] = "none: its heads or KV heads are odd";
        if (dtx_config_validate(&matched) == DTX_OK)
            snprintf(sizes, sizeof sizes, "%lld heads, %lld parameters", (long long)matched.n_heads,
                     (long long)dtx_config_num_params(&matched, NULL));
        printf("wrote %s: diff, %lld heads of q/k width %lld (the Transformer's), subln none, lambda_init 0, "
               "lambda 0 at the start\n",
               out, (long long)c->n_heads, (long long)dtx_config_head_dim(c));
        printf("parameters: %zu (the Transformer %zu; the parameter-matched DIFF: %s)\n", dtx_model_num_params(m),
               dtx_model_num_params(t), sizes);
    }
    dtx_model_free(t), dtx_model_free(m);
    return rc == EXIT_OK ? finish_stdout(CMD) : rc;
}

int cmd_convert(int argc, char **argv) {
    int from = -1, to = -1, bf16 = 0, diff = 0;
    const char *out = NULL;
    int64_t shard_mb = 5000;
    uint64_t seed = 1;
    flag fl[] = {
        FLAG_CHOICE("--from", &from, "hf", .help = "read a Hugging Face folder DIR into a difftx model file"),
        FLAG_CHOICE("--to", &to, "hf", .help = "write the difftx model (or checkpoint) MODEL as a Hugging Face folder"),
        FLAG_BOOL("--to-diff", &diff, 1,
                  .help = "the DIFF model of the Transformer MODEL (docs/huggingface.md \"A Llama into DIFF\")"),
        DTX_FLAG_SEED_OF(&seed, "--to-diff: seeds the lambda vectors (in equal pairs: lambda starts at 0)"),
        FLAG_STR("--out", &out, .metavar = "PATH", .help = "the model file (--from) or the folder (--to)",
                 .required = 1),
        FLAG_BOOL("--bf16", &bf16, 1, .help = "BF16 tensors (default F32)"),
        FLAG_INT("--shard-mb", &shard_mb, 0, 1 << 30, .metavar = "N",
                 .help = "--to: shards of at most N MB with an index (default 5000, as transformers; 0: one file)"),
    };
    const char *pos[1];
    int n_pos = 0, n_fl = (int)(sizeof fl / sizeof fl[0]);
    switch (flags_parse(CMD, USAGE, fl, n_fl, argc, argv, pos, 1, &n_pos)) {
    case FLAGS_HELP: return finish_stdout(CMD);
    case FLAGS_ERROR: return EXIT_USAGE;
    }
    if ((from >= 0) + (to >= 0) + diff != 1)
        return usage_error(CMD, "give one of --from hf DIR, --to hf MODEL or --to-diff MODEL");
    if (n_pos != 1) return usage_error(CMD, "expected the %s to convert", from >= 0 ? "folder" : "model");
    if (to < 0 && flags_get(fl, n_fl, "--shard-mb")->seen)
        return usage_error(CMD, "--shard-mb is for --to hf (a difftx model file is one file)");
    if (!diff && flags_get(fl, n_fl, "--seed")->seen) return usage_error(CMD, "--seed is for --to-diff");
    if (diff) return to_diff(pos[0], out, bf16, seed);
    dtx_model *m = NULL;
    if (from >= 0) {
        if (!dtx_is_hf_dir(pos[0]))
            return runtime_error(CMD, "%s: not a folder holding config.json (a Hugging Face checkpoint)", pos[0]);
        if (dtx_hf_import(&m, pos[0]) != DTX_OK) return lib_error(CMD);
        summary("read", pos[0], m);
        int rc = dtx_model_save(m, out, bf16) == DTX_OK ? EXIT_OK : lib_error(CMD);
        dtx_model_free(m);
        if (rc == EXIT_OK) printf("wrote %s%s\n", out, bf16 ? " (BF16)" : "");
        return rc == EXIT_OK ? finish_stdout(CMD) : rc;
    }
    if (dtx_model_open(&m, pos[0], DTX_PREC_FP32) != DTX_OK) return lib_error(CMD);
    int rc = dtx_hf_export(m, out, bf16, shard_mb * 1000000) == DTX_OK ? EXIT_OK : lib_error(CMD);
    if (rc == EXIT_OK) {
        summary("wrote", out, m);
        printf("tensors %s, %s\n", bf16 ? "BF16" : "F32", shard_mb ? "in shards of at most --shard-mb" : "one file");
    }
    dtx_model_free(m);
    return rc == EXIT_OK ? finish_stdout(CMD) : rc;
}
