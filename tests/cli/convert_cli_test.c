/* difftx convert, run as a separate process: a Hugging Face folder becomes a
 * model file that scores as the folder does (every command reads the folder
 * too), the model goes back out as a folder (one file or shards, F32 or
 * BF16) that reads back to the same parameters; bad flags and folders give
 * one line and exit 2 (usage) or 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "difftx.h"
#include "test.h"

#define CHECK_ERR(rc_want, call, s)                                                                \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        CHECKF(rc_ == (rc_want), "exit %d, want %d: %s", rc_, (rc_want), cli_out);                 \
        CHECKF(cli_one_line_from("difftx convert: "), "not one line: %s", cli_out);                \
        CHECKF(cli_has(s), "want '%s' in: %s", s, cli_out);                                        \
    } while (0)

static double score_of(const char *model, const char *tokens) {
    if (cli("score --model '%s' --tokens '%s'", model, tokens) != 0) return -1;
    const char *p = strstr(cli_out, "\"loss\": ");
    return p ? strtod(p + 8, NULL) : -1;
}

TEST(convert_cli_round_trips_a_hugging_face_folder) {
    const char *hf = fixture_path("hf/diffllama_gqa_bf16_sharded"), *toks = test_path("ids.txt");
    static const char ids[] = "1 5 9 3 60 2 7 7 0 33 12 4";
    REQUIRE(write_file(toks, ids, strlen(ids)) == 0);
    const char *m = test_path("conv.safetensors");
    CHECKF(cli("convert --from hf '%s' --out '%s'", hf, m) == 0 && cli_has("DiffLlamaForCausalLM") &&
               cli_has("heads 4, kv heads 1 (Hugging Face: 8 and 2)"),
           "%s", cli_out);
    double a = score_of(hf, toks), b = score_of(m, toks);
    CHECKF(a > 0 && a == b, "score of the folder %.9g, of the converted file %.9g", a, b);
    CHECK(cli("info '%s'", hf) == 0 && cli_has("arch            diff"));
    /* every command that reads a model reads the folder: sample, eval, quantize (and score and info above) */
    CHECKF(cli("sample --model '%s' --prompt '1 2 3' --max-tokens 4 --temperature 0", hf) == 0, "%s", cli_out);
    CHECKF(cli("eval ppl --model '%s' --tokens '%s'", hf, toks) == 0 && cli_has("11 scored"), "%s", cli_out);
    CHECKF(cli("eval outliers --model '%s' --tokens '%s' --count 8 --window 8", hf, toks) == 0, "%s", cli_out);
    CHECKF(cli("quantize --model '%s' --calib '%s' --calib-len 8 --calib-samples 4 --scheme w8a16 --out '%s'", hf, toks,
               test_path("conv_q.safetensors")) == 0 && score_of(test_path("conv_q.safetensors"), toks) > 0,
           "%s", cli_out);
    const char *dir = test_path("conv_hf");
    CHECKF(cli("convert --to hf '%s' --out '%s' --bf16 --shard-mb 0", m, dir) == 0 && cli_has("tensors BF16, one file"),
           "%s", cli_out);
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    struct stat sb;
    CHECK(stat(p, &sb) == 0);
    CHECKF(score_of(dir, toks) == a, "the exported folder scores %s", cli_out);
    dtx_model *x = NULL, *y = NULL;
    REQUIRE(dtx_model_load(&x, m) == DTX_OK && dtx_hf_import(&y, dir) == DTX_OK);
    CHECK(memcmp(dtx_model_params(x), dtx_model_params(y), sizeof(dtx_real) * dtx_model_num_params(x)) == 0);
    dtx_model_free(x), dtx_model_free(y);
    /* bad flags and inputs */
    CHECK_ERR(2, cli("convert --out '%s'", m), "give one of --from hf DIR, --to hf MODEL or --to-diff MODEL");
    CHECK_ERR(2, cli("convert --from hf '%s' --to hf --out '%s'", hf, m), "give one of");
    CHECK_ERR(2, cli("convert --from llama '%s' --out '%s'", hf, m), "--from");
    CHECK_ERR(2, cli("convert --from hf --out '%s'", m), "expected the folder to convert");
    CHECK_ERR(2, cli("convert --from hf '%s' --out '%s' --shard-mb 5", hf, m), "--shard-mb is for --to hf");
    CHECK_ERR(1, cli("convert --from hf '%s' --out '%s'", test_tmpdir(), m), "not a folder holding config.json");
    /* a Llama folder into DIFF: the same score; then training continues from it */
    const char *ld = test_path("llama_diff.safetensors"), *llama = fixture_path("hf/llama_gqa_untied");
    CHECKF(cli("convert --to-diff '%s' --out '%s' --seed 4", llama, ld) == 0 && cli_has("diff, 4 heads of q/k width 8") &&
               cli_has("the parameter-matched DIFF: 2 heads"),
           "%s", cli_out);
    double s0 = score_of(llama, toks), s1 = score_of(ld, toks);
    CHECKF(s0 > 0 && fabs(s0 - s1) < 1e-6 * s0, "score %.9g, after --to-diff %.9g", s0, s1);
    CHECKF(cli("train --init '%s' --tokens '%s' --out '%s' --steps 3 --batch 2 --seq 8", ld, toks,
               test_path("llama_diff_trained.safetensors")) == 0 && cli_has("final loss"),
           "%s", cli_out);
    CHECK(cli("info '%s'", ld) == 0 && cli_has("transformer_mix 1"));
    /* --diff-warmup: the DIFF form phased in over 4 steps; stopped and resumed midway, the same weights */
    const char *w1 = test_path("warm1.safetensors"), *w2 = test_path("warm2.safetensors");
    const char *args = "--diff-warmup 4 --steps 6 --batch 2 --seq 8";
    CHECKF(cli("train --init '%s' --tokens '%s' --out '%s' %s", ld, toks, w1, args) == 0 &&
               cli_has("diff warmup: transformer_mix 1 now"),
           "%s", cli_out);
    CHECKF(cli("train --init '%s' --tokens '%s' --out '%s' %s --ckpt-every 1 --stop-after 2", ld, toks, w2, args) == 0 &&
               cli("train --init '%s' --tokens '%s' --out '%s' %s --resume", ld, toks, w2, args) == 0,
           "%s", cli_out);
    size_t n1 = 0, n2 = 0;
    char *b1 = test_slurp(w1, &n1), *b2 = test_slurp(w2, &n2);
    CHECKF(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0, "a resumed --diff-warmup run differs from one run");
    free(b1), free(b2);
    CHECK(cli("info '%s'", w1) == 0 && !cli_has("transformer_mix"));
    CHECKF(cli("train --init '%s' --tokens '%s' --out '%s' --diff-warmup 2 --steps 6 --batch 2 --seq 8 --resume", ld,
               toks, w2) == 2 && cli_one_line_from("difftx train: ") && cli_has("--diff-warmup differs from the checkpoint"),
           "%s", cli_out);
    CHECK_ERR(2, cli("convert --to-diff '%s' --to hf --out '%s'", ld, m), "give one of");
    CHECK_ERR(2, cli("convert --from hf '%s' --out '%s' --seed 3", hf, m), "--seed is for --to-diff");
    CHECK_ERR(1, cli("convert --to-diff '%s' --out '%s'", m, test_path("x.safetensors")), "only a Transformer");
    dtx_config c = test_config(DTX_ARCH_DIFF2, 32, 2, 2, 2, 61, 48, 16, 1);
    const char *v2 = test_model_file("v2.safetensors", &c, 3);
    CHECK_ERR(1, cli("convert --to hf '%s' --out '%s'", v2, test_path("v2_hf")), "DIFF V2");
}
